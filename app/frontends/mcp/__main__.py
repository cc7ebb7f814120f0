"""`python -m app.frontends.mcp`: the MCP server (`--help` lists its options)."""

from app.frontends.mcp.server import main

main()
