"""The MCP server: the app's tools to any MCP client, over stdio or streamable HTTP (`python -m app.frontends.mcp`)."""
