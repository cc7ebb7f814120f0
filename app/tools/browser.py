"""Web browsing tools for one browser session: search, open a URL, open search results by number.

Every page or result gets a number for the session, so the model can cite it as [n] and the page can turn the
citation into a link to the source. Fetching goes through the SSRF guard on every hop, with size and time limits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

from app.config import BrowserSettings
from app.tools.documents import DocumentError, decode_text, extract_text
from app.tools.net_guard import fetch_guarded
from app.tools.tool_registry import ToolError

TIMEOUT_S = 10.0
MAX_BYTES = 3 * 1024 * 1024
MAX_PAGE_CHARS = 6000
USER_AGENT = "Mozilla/5.0 (compatible; composite-llm-demo/1.0; +local demo)"
_CITATION = re.compile(r"\[(\d{1,3})\](?!\()")
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


@dataclass
class Source:
    number: int
    title: str
    url: str
    snippet: str = ""


class WebBrowser:
    def __init__(self) -> None:
        self.sources: list[Source] = []

    # ----- citations ---------------------------------------------------------------------------------------

    def _source_for(self, url: str, title: str, snippet: str = "") -> Source:
        for source in self.sources:
            if source.url == url:
                if title and source.title == source.url:
                    source.title = title
                return source
        source = Source(len(self.sources) + 1, title or url, url, snippet)
        self.sources.append(source)
        return source

    def link_citations(self, text: str) -> str:
        """Turn [n] into a Markdown link to source n (numbers that name no source stay as they are)."""
        by_number = {source.number: source for source in self.sources}

        def link(match: re.Match[str]) -> str:
            source = by_number.get(int(match.group(1)))
            return f"[[{source.number}]]({source.url})" if source else match.group(0)

        return _CITATION.sub(link, text)

    # ----- tools -------------------------------------------------------------------------------------------

    def web_search(self, query: str, recency_days: int | None = None) -> str:
        """Search the web. Returns numbered results; cite them as [n] and open one with mclick or open_url.

        Args:
            query: What to search for.
            recency_days: Only results from the last this many days (optional).
        """
        if not query.strip():
            raise ToolError("the search query is empty.")
        searxng_url = BrowserSettings.from_env().searxng_url
        results = _searxng(searxng_url, query, recency_days) if searxng_url else _ddgs(query, recency_days)
        if not results:
            return f"No results for {query!r}."
        lines = []
        for title, url, snippet in results[:6]:
            source = self._source_for(url, title, snippet)
            lines.append(f"[{source.number}] {source.title} ({url})\n{snippet}".strip())
        return "\n\n".join(lines)

    def open_url(self, url: str) -> str:
        """Open a web page (or a PDF or text file) and read its main text. Cite it as [n] with the number shown.

        Args:
            url: The full http(s) address to open.
        """
        final_url, title, text = fetch_readable(url.strip())
        source = self._source_for(final_url, title)
        cut = "" if len(text) <= MAX_PAGE_CHARS else f"\n[... {len(text) - MAX_PAGE_CHARS} more characters cut]"
        return f"[{source.number}] {source.title} ({source.url})\n\n{text[:MAX_PAGE_CHARS]}{cut}"

    def mclick(self, ids: list[int]) -> str:
        """Open several earlier search results at once, by their numbers.

        Args:
            ids: The result numbers to open, e.g. [1, 3].
        """
        by_number = {source.number: source for source in self.sources}
        pages = []
        for number in ids[:5]:
            source = by_number.get(number)
            if source is None:
                pages.append(f"[{number}] Error: there is no result [{number}]; search first.")
                continue
            try:
                pages.append(self.open_url(source.url))
            except ToolError as exc:
                pages.append(f"[{number}] Error: {exc}")
        return "\n\n---\n\n".join(pages) if pages else "No result numbers given."


_SOURCE_LINE = re.compile(r"^\[(\d{1,3})\] (.+?) \((https?://[^\s)]+)\)$", re.MULTILINE)


def cited_sources(tool_output: str) -> list[tuple[int, str, str]]:
    """The numbered sources ("[n] Title (url)" lines) that web tools wrote into their results, in order."""
    seen: dict[int, tuple[int, str, str]] = {}
    for match in _SOURCE_LINE.finditer(tool_output):
        number = int(match.group(1))
        seen.setdefault(number, (number, match.group(2).replace("[", "(").replace("]", ")"), match.group(3)))
    return list(seen.values())


def fetch_readable(url: str) -> tuple[str, str, str]:
    """(final URL, title, main text) of a URL, following redirects only to addresses the guard allows."""
    final_url, content_type, body = fetch_guarded(url, MAX_BYTES, TIMEOUT_S, "page", USER_AGENT)
    return (final_url, *_readable(final_url, content_type, body))


def _readable(url: str, content_type: str, body: bytes) -> tuple[str, str]:
    kind = content_type.split(";")[0].strip().lower()
    charset = re.search(r"charset=([\w.-]+)", content_type, re.IGNORECASE)
    declared = charset.group(1) if charset else None
    try:
        if kind in ("text/html", "application/xhtml+xml") or (not kind and body.lstrip()[:1] == b"<"):
            import trafilatura

            html = decode_text(url, body, declared)
            text = trafilatura.extract(html, url=url, include_comments=False, favor_precision=True) or ""
            found = _TITLE.search(html)
            title = re.sub(r"\s+", " ", found.group(1)).strip() if found else url
            if not text.strip():
                raise ToolError(f"{url} has no readable text (a page built by JavaScript?).")
            return title, text.strip()
        if kind == "application/pdf":
            return url, extract_text("page.pdf", body)
        if kind.startswith("text/") or kind in ("application/json", "application/xml"):
            return url, decode_text(url, body, declared).strip()
    except DocumentError as exc:
        raise ToolError(str(exc)) from None
    raise ToolError(f"{url} is {kind or 'of an unknown type'}, which cannot be read as text.")


def _ddgs(query: str, recency_days: int | None) -> list[tuple[str, str, str]]:
    from ddgs import DDGS

    try:
        hits = DDGS(timeout=int(TIMEOUT_S)).text(query, max_results=6, timelimit=_timelimit(recency_days)) or []
    except Exception as exc:  # ddgs raises its own exception types for network failures and rate limits
        raise ToolError(f"the web search failed ({type(exc).__name__}: {exc}); the computer may be offline. "
                        "A SearXNG server can be used instead (DEMO_SEARXNG_URL).") from None
    return [(h.get("title", ""), h.get("href", ""), h.get("body", "")) for h in hits if h.get("href")]


def _searxng(searxng_url: str, query: str, recency_days: int | None) -> list[tuple[str, str, str]]:
    base = searxng_url.rstrip("/")
    params = {"q": query, "format": "json"}
    time_range = {"d": "day", "w": "week", "m": "month", "y": "year"}.get(_timelimit(recency_days) or "")
    if time_range:
        params["time_range"] = time_range
    try:
        response = httpx.get(f"{base}/search", params=params, timeout=TIMEOUT_S, headers={"User-Agent": USER_AGENT})
        response.raise_for_status()
        hits = response.json().get("results", [])
    except (httpx.HTTPError, ValueError) as exc:
        raise ToolError(f"the SearXNG server at {base} failed: {exc}") from None
    return [(h.get("title", ""), h.get("url", ""), h.get("content", "")) for h in hits if h.get("url")]


def _timelimit(recency_days: int | None) -> str | None:
    if not recency_days or recency_days <= 0:
        return None
    return "d" if recency_days <= 1 else "w" if recency_days <= 7 else "m" if recency_days <= 31 else "y"
