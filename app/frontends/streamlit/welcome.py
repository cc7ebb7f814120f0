"""What an empty page shows: what the page does, and example prompts as buttons that work offline with the loaded
model. A tool page's examples are made for one tool each and offered only while that tool is on; sending one
forces that tool's call for its first step (constrained decoding), so even the embedded 135M model answers it
with the tool rather than from memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from app.agent.loop import ToolSettings
from app.domain.conversation import Conversation, Message
from app.frontends.streamlit import state


@dataclass(frozen=True)
class Example:
    label: str  # the button's text
    prompt: str  # what is sent
    tool: str | None = None  # the tool it is made for: offered only when it is on, and its call forced


INTRODUCTIONS = {
    "chat": "Talk with the model. Attach pictures (for a model that can see) or documents; every answer shows "
            "its speed and can be stopped, copied, regenerated or edited, and earlier versions are kept.",
    "tools": "The model may call the tools switched on in the sidebar; each call appears as a card with its "
             "arguments and result. *Tool choice* forces a call, which even a small model then writes correctly.",
    "all_tools": "Python in a sandbox (with plots), a web browser, image generation and your documents. Code "
                 "and results show as cards; attach files to work on them in Python.",
}

EXAMPLES = {
    "chat": (
        Example("Capital of France", "What is the capital of France?"),
        Example("A haiku", "Write a haiku about the sea."),
        Example("Three tips, one per line", "Give me three short tips for learning Python, one per line."),
        Example("Explain recursion", "Explain recursion to a child in two sentences."),
    ),
    "tools": (
        Example("17 × 23", "What is 17 * 23?", "calculator"),
        Example("10 miles in km", "Convert 10 miles to kilometres.", "convert_units"),
        Example("Time in Tokyo", "What time is it in Tokyo?", "current_time"),
        Example("Count words", "How many words are in 'the quick brown fox jumps over the lazy dog'?", "count_words"),
    ),
    "all_tools": (
        Example("Plot a parabola", "Plot y = x squared for x from -5 to 5 with Python.", "python"),
        Example("2 to the 100th", "Compute 2 to the power of 100 with Python.", "python"),
        Example("Primes below 50", "List the prime numbers below 50 using Python.", "python"),
        Example("17 × 23", "What is 17 * 23?", "calculator"),
    ),
}

PLACEHOLDERS = {
    "chat": "Message the model, e.g. \"Write a haiku about the sea\" (attach pictures and documents with +)",
    "tools": "Ask something a tool answers, e.g. \"What is 17 * 23?\"",
    "all_tools": "Ask for code and plots, or attach files, e.g. \"Plot y = x squared with Python\"",
}


def offered(page: str, tools: ToolSettings | None = None) -> list[Example]:
    """The page's examples that work now: those made for a tool only while that tool is on."""
    enabled = set(tools.registry.names) if tools is not None else set()
    return [example for example in EXAMPLES[page] if example.tool is None or example.tool in enabled]


def render(page: str, conversation: Conversation, tools: ToolSettings | None = None, submitted: Any = None) -> None:
    """On an empty conversation: the page's introduction and its examples as buttons (not while the first
    message, `submitted` from the message box, is being answered)."""
    if conversation.messages or submitted is not None or state.turn_requested(page):
        return
    with st.container(key=f"welcome/{page}"):
        st.markdown(INTRODUCTIONS[page])
        examples = offered(page, tools)
        if not examples:
            st.caption("Switch a tool on in the sidebar to see examples.")
            return
        st.caption("Try one:" if page == "chat" else "Try one (each calls the tool named under it):")
        columns = st.columns(len(examples))
        for column, example in zip(columns, examples, strict=True):
            column.button(example.label, key=f"example/{page}/{example.label}", width="stretch",
                          help=example.prompt, on_click=_send, args=(page, conversation, example))
            if example.tool:
                column.caption(f":material/build: {example.tool}")


def _send(page: str, conversation: Conversation, example: Example) -> None:
    conversation.add(Message(role="user", content=example.prompt))
    state.request_turn(page, tool=example.tool)
