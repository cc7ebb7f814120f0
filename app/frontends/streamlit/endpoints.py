"""Which OpenAI-compatible servers a visitor may point the app at.

The app connects to the API base URL from the server: a URL a visitor types would let them reach what only the
server can (a database port, a cloud metadata address at 169.254.169.254, an admin page on the private network) and
read its answers in the error text. So a typed URL passes the same guard as the browser tool's fetches
(app/tools/net_guard.py: public addresses only, DEMO_BROWSER_ALLOW for more), except:

- the administrator's own URL (DEMO_API_BASE_URL), which is theirs to choose;
- any URL while the app listens on loopback only (`make run`'s default): then every visitor is a process on this
  machine, which reaches those addresses itself already.
"""

from __future__ import annotations

import ipaddress

from streamlit import config as streamlit_config

from app.clients.choice import default_backend
from app.config import ModelSettings
from app.tools.net_guard import check_url
from app.tools.tool_registry import ToolError


def base_url_problem(base_url: str) -> str | None:
    """Why the app will not connect to `base_url` for this visitor, or None."""
    configured = ModelSettings.from_env(default_backend).api_base_url
    if _normal(base_url) == _normal(configured) or serves_this_machine_only():
        return None
    try:
        check_url(base_url)
    except ToolError as exc:
        return (f"{exc} The app is reachable from other machines, so it only connects to public API servers for "
                "its visitors; the administrator can set this one in DEMO_API_BASE_URL or allow it in "
                "DEMO_BROWSER_ALLOW.")
    return None


def serves_this_machine_only() -> bool:
    """Whether Streamlit listens on a loopback address only (server.address; unset means every interface)."""
    address = str(streamlit_config.get_option("server.address") or "").strip("[]")
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _normal(url: str) -> str:
    return url.strip().rstrip("/")
