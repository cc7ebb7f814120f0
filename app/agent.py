"""One assistant turn as a stream of UI-agnostic events; the Streamlit pages and the API server render them.

The turn always ends with the answer recorded in the conversation, also when the consumer stops reading
(Stop button, closed browser tab): closing the event generator cancels generation and keeps the partial answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass

from app.chat_format import process_input, process_response
from app.clients.base import Client, ClientError, GenerationParams
from app.conversation import AnswerMetrics, Conversation, Message


@dataclass
class TextDelta:
    text: str


@dataclass
class Notice:
    text: str


@dataclass
class Waiting:
    """The backend is busy with another session; a UI uses this beat to stay responsive to Stop."""


@dataclass
class TurnError:
    message: str


@dataclass
class TurnDone:
    message: Message


Event = TextDelta | Notice | Waiting | TurnError | TurnDone


def run_turn(
    client: Client,
    conversation: Conversation,
    params: GenerationParams,
    system_prompt: str = "",
    cancel: threading.Event | None = None,
) -> Iterator[Event]:
    """Answer the conversation's last message; append the answer (complete, partial or failed) to it."""
    cancel = cancel or threading.Event()
    answer = Message(role="assistant", metrics=AnswerMetrics())
    parts: list[str] = []
    started = time.perf_counter()
    try:
        with closing(client.stream(process_input(conversation, system_prompt), params, cancel)) as deltas:
            for delta in deltas:
                answer.metrics = delta.metrics
                if delta.notice:
                    yield Notice(delta.notice)
                if delta.text:
                    parts.append(delta.text)
                    yield TextDelta(delta.text)
                elif not delta.notice and not delta.finish_reason:
                    yield Waiting()
    except ClientError as exc:
        answer.error = str(exc)
        _mark(answer, "error", started)
        yield TurnError(str(exc))
    except Exception as exc:  # a bug must end this turn with a message, not take the page down
        answer.error = f"Unexpected error in the backend: {type(exc).__name__}: {exc}"
        _mark(answer, "error", started)
        yield TurnError(answer.error)
    except GeneratorExit:
        cancel.set()  # the consumer left: the client's own cleanup already stopped generation
        _mark(answer, "cancelled", started)
        raise
    finally:
        answer.content = process_response("".join(parts)).content
        conversation.add(answer)
    yield TurnDone(answer)


def _mark(answer: Message, reason: str, started: float) -> None:
    metrics = answer.metrics or AnswerMetrics()
    if metrics.finish_reason is None or reason == "error":
        metrics.finish_reason = reason  # type: ignore[assignment]
    metrics.total_time_s = metrics.total_time_s or time.perf_counter() - started
    answer.metrics = metrics
