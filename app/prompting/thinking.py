"""Reasoning ("thinking") models: their reply opens with a thought between markers (`<think>…</think>` for Qwen3,
DeepSeek-R1 distills, SmolLM3, GLM-Z1), then the answer. `ThinkingSplitter` separates the two as the reply streams,
so a front end can show the thought apart from the answer and the answer alone is parsed for tool calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.prompting.partial_match import partial_marker_length


@dataclass(frozen=True)
class ThinkingMarkers:
    open: str = "<think>"
    close: str = "</think>"


THINK_TAGS = ThinkingMarkers()


class ThinkingSplitter:
    """Splits a streamed reply into its thought and the rest; `feed` returns (thought, answer) text as far as it
    is certain, holding back what may be the start of a marker. The pieces joined are the same however the reply
    was chunked (white space around them is the consumer's to strip).

    A thought is only where the reply begins: with the opening marker (after white space), or from the first token
    when the prompt already opened it (`started`: templates that end the generation prompt with `<think>`). A
    thought ends at the closing marker, or where one of `exits` appears: a tool call begun inside an unclosed
    thought (the call and what follows are the answer, so the call still parses).
    """

    def __init__(self, markers: ThinkingMarkers = THINK_TAGS, started: bool = False, exits: Sequence[str] = ()) -> None:
        self.markers = markers
        self.exits = tuple(exit for exit in exits if exit)
        self._state = "thinking" if started else "start"  # start -> thinking -> answer, or start -> answer
        self._held = ""

    @property
    def thinking(self) -> bool:
        """Inside the thought now (what comes next belongs to it, unless it closes)."""
        return self._state == "thinking"

    def feed(self, text: str) -> tuple[str, str]:
        self._held += text
        thought, answer = [], []
        while self._held:
            if self._state == "answer":
                answer.append(self._held)
                self._held = ""
            elif self._state == "start":
                stripped = self._held.lstrip()
                if stripped.startswith(self.markers.open):
                    self._held = stripped[len(self.markers.open):]
                    self._state = "thinking"
                elif not stripped or self.markers.open.startswith(stripped):
                    break  # white space, or the marker's start: wait for more
                else:
                    self._state = "answer"
            else:
                piece, done = self._take_thought()
                thought.append(piece)
                if not done:
                    break
        return "".join(thought), "".join(answer)

    def _take_thought(self) -> tuple[str, bool]:
        """The thought text that is certain now, and whether the thought ended (the rest is then the answer)."""
        ends = [(self._held.find(self.markers.close), len(self.markers.close))]
        ends += [(self._held.find(exit), 0) for exit in self.exits]  # an exit string stays: it starts the answer
        found = [(index, length) for index, length in ends if index >= 0]
        if found:
            index, length = min(found)
            piece = self._held[:index]
            self._held = self._held[index + length:] if length else self._held[index:]
            self._state = "answer"
            return piece, True
        keep = partial_marker_length(self._held, [self.markers.close, *self.exits])
        piece, self._held = self._held[: len(self._held) - keep], self._held[len(self._held) - keep:]
        return piece, False

    def finish(self) -> tuple[str, str]:
        """What is still held back: part of a thought that was never closed, or text that looked like a marker."""
        held, self._held = self._held, ""
        if self._state == "thinking":
            return held, ""
        return "", held
