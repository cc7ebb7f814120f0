"""Shared by every client: conversation -> prompt messages (`process_input`) and model text -> answer
(`process_response`), plus fitting a prompt into the context window.

Tool-call dialects (app/dialects/) decide how tools, past calls and results are rendered for a model family and
how its replies are parsed; the clients apply them when they turn these messages into a prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.conversation import Conversation, Message
from app.dialects import Dialect, ParsedResponse


def process_input(conversation: Conversation, system_prompt: str = "") -> list[dict[str, Any]]:
    """OpenAI-format messages to prompt with: the system prompt first, failed or empty answers left out."""
    messages: list[dict[str, Any]] = []
    if system_prompt.strip():
        messages.append({"role": "system", "content": system_prompt.strip()})
    for message in conversation.messages:
        if _belongs_in_prompt(message):
            messages.append(message.to_openai())
    return messages


def _belongs_in_prompt(message: Message) -> bool:
    if message.role != "assistant":
        return True
    # An answer that failed, or was stopped before it said anything, is shown to the user but not fed back.
    return message.error is None and bool(message.content.strip() or message.tool_calls)


def process_response(text: str, dialect: Dialect | None = None, tool_names: Sequence[str] = ()) -> ParsedResponse:
    """A finished reply as content and tool calls. Without a dialect or tools the whole reply is content.
    (Streaming clients use `dialect.stream_parser`, which yields the same result chunk by chunk.)"""
    if dialect is None or not tool_names:
        return ParsedResponse(content=text.strip())
    return dialect.parse(text, tool_names)


class PromptTooLong(ValueError):
    """Even the newest user turn alone does not fit the context window."""


@dataclass
class FittedPrompt:
    messages: list[dict[str, Any]]
    token_count: int
    dropped_messages: int


def fit_to_context(
    messages: Sequence[dict[str, Any]],
    count_tokens: Callable[[list[dict[str, Any]]], int],
    budget: int,
) -> FittedPrompt:
    """Drop the oldest turns (a user message and what answered it) until the prompt fits `budget` tokens.

    The system prompt and the newest user turn are always kept; if they alone are too long, PromptTooLong says
    by how much, because silently cutting a user's own message would answer a question they did not ask.
    """
    system = [m for m in messages[:1] if m.get("role") == "system"]
    rest = list(messages[len(system) :])
    # Candidate cut points: keep everything, then start at each later user message in turn.
    turn_starts = [0] + [i for i, m in enumerate(rest) if m.get("role") == "user" and i > 0]
    dropped_turns = 0
    while True:
        start = turn_starts[dropped_turns] if dropped_turns < len(turn_starts) else len(rest)
        candidate = system + rest[start:]
        tokens = count_tokens(candidate)
        if tokens <= budget:
            return FittedPrompt(candidate, tokens, dropped_messages=start)
        if dropped_turns + 1 >= len(turn_starts):
            raise PromptTooLong(
                f"The prompt needs {tokens} tokens but only {budget} fit "
                "(context window minus room for the answer). Shorten the message or the system prompt, "
                "lower 'Max new tokens', or use a model with a longer context window."
            )
        dropped_turns += 1
