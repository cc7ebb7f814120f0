"""The HTTP and MCP surfaces on 127.0.0.1: the OpenAI-compatible server with real SDK clients and Codex CLI, the
MCP client against real MCP servers, the MCP server, the README's examples."""
