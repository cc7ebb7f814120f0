"""Holding back the end of a stream that may still grow into a marker: a stop string, or a dialect's call tag."""

from __future__ import annotations

from collections.abc import Sequence
from typing import AnyStr


def partial_marker_length(text: AnyStr, markers: Sequence[AnyStr]) -> int:
    """Length of the longest end of `text` (shorter than the longest marker) that starts one of `markers`: what a
    stream must hold back until the next chunk shows whether the marker follows. 0 when nothing needs holding.

    Only the last (longest marker - 1) characters are read, so the cost does not grow with `text`."""
    longest = max((len(marker) for marker in markers), default=0)
    for size in range(min(len(text), longest - 1), 0, -1):
        tail = text[-size:]
        if any(marker.startswith(tail) for marker in markers):
            return size
    return 0
