"""Tools from MCP (Model Context Protocol) servers, client side, through the official `mcp` SDK.

    manager = McpManager()                       # the servers of mcp.json (McpSettings.from_env())
    manager.refresh(manager.connections())       # connect, list tools (all servers at once)
    tools = mcp_registry(manager, manager.connections(), taken=load_tools().names)
    load_tools().merged(tools)                   # what the agent loop gets; calls go to the servers

(Not named `app/mcp`: `streamlit run app/main.py` puts app/ on sys.path, where a package of that name would hide
the SDK's own `mcp`.)
"""

from app.mcp_client.connection import ServerConnection, ServerStatus
from app.mcp_client.manager import McpManager
from app.mcp_client.mcp_tools import mcp_registry
from app.mcp_client.server_config import HttpServer, McpConfigError, ServerSpec, StdioServer, bearer_server, load_config

__all__ = ["HttpServer", "McpConfigError", "McpManager", "ServerConnection", "ServerSpec", "ServerStatus",
           "StdioServer", "bearer_server", "load_config", "mcp_registry"]
