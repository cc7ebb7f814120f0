"""Cut a text stream at the first stop string without ever showing part of one.

Only the tail that could still grow into a stop string is held back, so the work per chunk is bounded by the
longest stop string, not by the length of the answer.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.prompting.partial_match import partial_marker_length


class StopStringFilter:
    def __init__(self, stop_strings: Iterable[str]) -> None:
        self.stop_strings = tuple(s for s in stop_strings if s)
        self._pending = ""
        self.stopped = False
        self.matched: str | None = None

    def feed(self, chunk: str) -> str:
        """Return the text that is safe to show now."""
        if self.stopped:
            return ""
        if not self.stop_strings:
            return chunk
        # Search only where a stop string could now appear: the held-back tail plus the new chunk.
        window = self._pending + chunk
        keep = partial_marker_length(window, self.stop_strings)
        hit = self._first_match(window)
        # A complete match wins unless a stop string that starts earlier may still complete in the next chunk.
        if hit is not None and (not keep or hit[0] <= len(window) - keep):
            self.stopped, self.matched = True, hit[1]
            self._pending = ""
            return window[: hit[0]]
        self._pending = window[len(window) - keep :] if keep else ""
        return window[: len(window) - keep]

    def _first_match(self, text: str) -> tuple[int, str] | None:
        return min(((index, s) for s in self.stop_strings if (index := text.find(s)) != -1), default=None)

    def flush(self) -> str:
        """At the end of the stream the held-back tail did not grow into the stop string it started; it may still
        hold a later, shorter one."""
        text, self._pending = ("" if self.stopped else self._pending), ""
        hit = self._first_match(text)
        if hit is not None:
            self.stopped, self.matched = True, hit[1]
            return text[: hit[0]]
        return text
