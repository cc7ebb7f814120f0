"""Line breaks as the author wrote them: a model's "one per line" answer must not render as one paragraph.

In CommonMark (and so in Streamlit's markdown) a single newline inside a paragraph is a soft break that renders as
a space. Chat front ends (ChatGPT, Open WebUI, chat-ui) render it as a line break, as remark-breaks does; here a
line that another non-blank line follows gets the two trailing spaces that make its newline a hard break. Fenced
code is left exactly as written (a trailing space there would be part of the code).
"""

from __future__ import annotations

import re

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def keep_line_breaks(text: str) -> str:
    """`text` with every newline between two non-blank lines outside fenced code made a hard line break."""
    if "\n" not in text:
        return text
    lines = text.split("\n")
    fence: str | None = None  # the opening fence of the code block we are in
    for number, line in enumerate(lines[:-1]):
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence) \
                    and not line.strip().strip(fence[0]):
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        if line.strip() and lines[number + 1].strip() and not line.endswith(("  ", "\\")) \
                and not _FENCE.match(lines[number + 1]):
            lines[number] = line + "  "
    return "\n".join(lines)
