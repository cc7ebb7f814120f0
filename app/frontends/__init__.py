"""The thin front ends over the core: the Streamlit pages (streamlit/), the OpenAI-compatible HTTP API (api/) and the
MCP server (mcp/). Nothing below app/frontends imports from here."""
