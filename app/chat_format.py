"""Shared by every client: conversation -> prompt messages (`process_input`) and model text -> answer
(`process_response`), plus fitting a prompt into the context window.

Tool-call dialects plug in here: a dialect decides how tools and past calls are rendered and how a reply is
parsed. Without tools the plain dialect applies: the reply is the answer text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.conversation import Conversation, Message, ToolCall


@dataclass
class ParsedResponse:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


class PlainDialect:
    """No tools: the whole reply is content; stop strings are only what the user asked for."""

    name = "plain"
    stop_strings: tuple[str, ...] = ()

    def parse(self, text: str) -> ParsedResponse:
        return ParsedResponse(content=text.strip())


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


def process_response(text: str, dialect: PlainDialect | None = None) -> ParsedResponse:
    return (dialect or PlainDialect()).parse(text)


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
