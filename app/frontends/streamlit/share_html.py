"""A conversation as one self-contained HTML page, to share with someone who does not have the app: text (markdown
rendered), thoughts, tool calls with their results, pictures and cited passages, readable in any browser offline.

Nothing in it loads anything: pictures are data: URIs, the style is inline, there is no script, and its own
Content-Security-Policy (a meta tag) forbids every fetch but data: images, so a hostile message (raw HTML, a remote
image, a javascript: link) can neither run nor call home when the file is opened. Markdown is rendered by
markdown-it with raw HTML off (it is shown as text) and its own URL check (no javascript:, vbscript:, file: or
data: links); images written in markdown become links, as on the page (app/frontends/streamlit/safe_markdown.py)."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from markdown_it import MarkdownIt

from app.domain.conversation import Attachment, Message
from app.domain.media import ImageError, sniff_mime

CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
_STYLE = """
body{font:16px/1.5 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222;background:#fff}
@media (prefers-color-scheme:dark){body{color:#ddd;background:#161616}.msg{border-color:#333}
pre,code{background:#222!important}}
h1{font-size:1.5rem}.msg{border:1px solid #ddd;border-radius:.5rem;padding:.5rem 1rem;margin:1rem 0}
.role{font-weight:600;font-size:.85rem;text-transform:uppercase;opacity:.7}.user{background:rgba(127,127,127,.07)}
pre{background:#f4f4f4;padding:.5rem;overflow-x:auto;white-space:pre-wrap}code{background:#f4f4f4}
img{max-width:100%}.meta{font-size:.8rem;opacity:.7}details{margin:.5rem 0}summary{cursor:pointer}
.error{color:#b00}
"""


def _markdown() -> MarkdownIt:
    renderer = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")

    def image(renderer: Any, tokens: Any, index: int, options: Any, env: Any) -> str:  # markdown image: a link
        token = tokens[index]
        source = html.escape(str(token.attrGet("src") or ""), quote=True)
        alt = html.escape(token.content or source)
        return f'<a href="{source}" rel="noreferrer">{alt}</a>'

    renderer.add_render_rule("image", image)
    return renderer


_MD = _markdown()


def conversation_html(title: str, messages: Sequence[Message], exported_at: datetime | None = None) -> str:
    """The page for the conversation on screen (its current branch)."""
    when = (exported_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    title = title.strip() or "Conversation"
    body = "\n".join(_message(message) for message in messages)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="referrer" content="no-referrer">\n'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">\n'
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n"
            f"<body><h1>{html.escape(title)}</h1>\n<p class=\"meta\">Shared from the composite LLM demo, "
            f"{when}.</p>\n{body}\n</body></html>\n")


def _message(message: Message) -> str:
    parts = [f'<div class="role">{html.escape(message.role)}</div>']
    if message.thinking:
        parts.append(f"<details><summary>Thought</summary>{_MD.render(message.thinking)}</details>")
    if message.role == "tool":
        parts.append(_tool_result(message))
    elif message.content:
        parts.append(_MD.render(message.content))
    for call in message.tool_calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False, indent=1)
        parts.append(f"<details><summary>Tool call: {html.escape(call.name)}</summary>"
                     f"<pre>{html.escape(arguments)}</pre></details>")
    parts.extend(_attachment(attachment) for attachment in message.attachments)
    if message.error:
        parts.append(f'<p class="error">{html.escape(message.error)}</p>')
    if message.metrics is not None and message.role == "assistant":
        metrics = message.metrics
        figures = [f"{metrics.completion_tokens} tokens"]
        if metrics.tokens_per_second:
            figures.append(f"{metrics.tokens_per_second:.1f} tok/s")
        parts.append(f'<p class="meta">{html.escape(" · ".join(figures))}</p>')
    return f'<div class="msg {html.escape(message.role)}">{"".join(parts)}</div>'


def _tool_result(message: Message) -> str:
    label = f"Result of {message.name}" if message.name else "Tool result"
    status = f" ({message.tool_status})" if message.tool_status else ""
    text = message.display_text or message.content
    return f"<details open><summary>{html.escape(label + status)}</summary><pre>{html.escape(text)}</pre></details>"


def _attachment(attachment: Attachment) -> str:
    if attachment.kind == "image" and attachment.data:
        try:
            mime = sniff_mime(attachment.data)
        except ImageError:
            return f"<p class=\"meta\">(a picture that could not be read: {html.escape(attachment.name)})</p>"
        data = base64.b64encode(attachment.data).decode()
        return f'<p><img alt="{html.escape(attachment.name, quote=True)}" src="data:{mime};base64,{data}"></p>'
    if attachment.kind == "passages":
        sources = "".join(
            f"<details><summary>[{source.number}] {html.escape(source.document)} · {html.escape(source.location)}"
            f"</summary><pre>{html.escape(source.text)}</pre></details>" for source in attachment.sources)
        return f"<div><p class=\"meta\">Sources: {html.escape(attachment.name)}</p>{sources}</div>"
    if attachment.kind == "document":
        note = f" · {attachment.note}" if attachment.note else ""
        return f'<p class="meta">Attached: {html.escape(attachment.name + note)}</p>'
    return ""
