"""A Responses API answer as the core's deltas come in: its output items (a file_search_call first where the server
searched, a reasoning item for a thought, a message for text with its file citations, a function_call per tool
call), the Response object at any moment, and, for a stream, the typed events
`openai.types.responses` defines, numbered in order (`sequence_number`), that the SDKs put back together."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFailedEvent,
    ResponseFileSearchCallCompletedEvent,
    ResponseFileSearchCallInProgressEvent,
    ResponseFileSearchCallSearchingEvent,
    ResponseFileSearchToolCall,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItem,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseOutputTextAnnotationAddedEvent,
    ResponseReasoningItem,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
)
from openai.types.responses.response_file_search_tool_call import Result as FileSearchResult
from openai.types.responses.response_reasoning_item import Content as ReasoningText
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from app.clients.client_protocol import Delta
from app.domain.conversation import AnswerMetrics, CallFragment
from app.frontends.api.responses.file_search import citations
from app.frontends.api.responses.responses_protocol import Tools
from app.knowledge.vector_stores import SearchResult

Status = Literal["completed", "incomplete", "in_progress"]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass
class _Item:
    """One output item as far as it got."""

    kind: Literal["reasoning", "message", "function_call", "file_search_call"]
    id: str
    text: list[str] = field(default_factory=list)  # the message's text, the thought, or the call's arguments
    call_id: str = ""
    name: str = ""
    namespace: str | None = None
    done: bool = False
    queries: list[str] = field(default_factory=list)  # a file_search_call's


class ResponseOutput:
    """One response being written. `settings` are the Response fields that echo the request (instructions, tools,
    tool_choice, temperature...); `summarize` puts the thought into the reasoning item's summary as well (the
    request asked for a summary, and a local model's thought is its own best summary). `searched` is what a
    file_search found before the answer (its query and results): the first output item, and what [n] cites;
    `show_results` puts the results in that item (the request included "file_search_call.results")."""

    def __init__(self, model: str, settings: dict[str, Any], tools: Tools, summarize: bool,
                 searched: tuple[str, list[SearchResult]] | None = None, show_results: bool = False) -> None:
        self.id = new_id("resp")
        self.created_at = int(time.time())
        self.model, self.settings, self.tools, self.summarize = model, settings, tools, summarize
        self.items: list[_Item] = []
        self._calls: dict[int, _Item] = {}  # by the core's call index
        self._sequence = 0
        self.metrics = AnswerMetrics()
        self.status: Literal["completed", "failed", "in_progress", "incomplete"] = "in_progress"
        self.error: str | None = None
        self.found = searched[1] if searched else []
        self.show_results = show_results
        # Output item 0 once the response says it began (a stream's opening events show no output yet).
        self._search: _Item | None = _Item("file_search_call", new_id("fs"), queries=[searched[0]], done=True) \
            if searched is not None else None

    # ----- the Response object ----------------------------------------------------------------------------------

    def response(self) -> Response:
        """The response as it stands: its items so far, its status and usage."""
        incomplete = {"reason": "max_output_tokens"} if self.status == "incomplete" else None
        error = {"code": "server_error", "message": self.error} if self.error else None
        return Response.model_validate({
            "id": self.id, "object": "response", "created_at": self.created_at, "model": self.model,
            "status": self.status, "output": [self._model(item).model_dump(exclude_none=True) for item in self.items],
            "error": error, "incomplete_details": incomplete, "usage": self._usage() if self.status != "in_progress"
            else None, **self.settings})

    def _usage(self) -> ResponseUsage:
        metrics = self.metrics
        return ResponseUsage(input_tokens=metrics.prompt_tokens,
                             input_tokens_details=InputTokensDetails(cached_tokens=metrics.cached_tokens,
                                                                                cache_write_tokens=0),
                             output_tokens=metrics.completion_tokens,
                             output_tokens_details=OutputTokensDetails(reasoning_tokens=metrics.thinking_tokens),
                             total_tokens=metrics.prompt_tokens + metrics.completion_tokens)

    def _model(self, item: _Item) -> ResponseOutputItem:
        status: Status = "in_progress" if not item.done else (
            "incomplete" if self.status == "incomplete" else "completed")
        text = "".join(item.text)
        if item.kind == "reasoning":
            thought = text.strip() if item.done else text
            return ResponseReasoningItem(
                id=item.id, type="reasoning", status=status,
                summary=[Summary(type="summary_text", text=thought)] if item.done and self.summarize else [],
                content=[ReasoningText(type="reasoning_text", text=thought)])
        if item.kind == "message":
            return ResponseOutputMessage(id=item.id, type="message", role="assistant", status=status, content=[
                ResponseOutputText(type="output_text", text=text, annotations=self._citations(item), logprobs=[])])
        if item.kind == "file_search_call":
            return self._file_search_call(item, status)
        return ResponseFunctionToolCall(id=item.id, type="function_call", status=status, call_id=item.call_id,
                                        name=item.name, namespace=item.namespace, arguments=text)

    def _file_search_call(self, item: _Item, status: Status) -> ResponseFileSearchToolCall:
        results = [FileSearchResult(file_id=found.file_id, filename=found.filename, score=found.score,
                                    text=found.text, attributes={"location": found.location})
                   for found in self.found] if self.show_results and status != "in_progress" else None
        return ResponseFileSearchToolCall(id=item.id, type="file_search_call", queries=item.queries,
                                          status="completed" if status == "incomplete" else status, results=results)

    def _citations(self, item: _Item) -> list[Any]:
        """The file citations of a finished message ([n] markers naming a passage the search found)."""
        return citations("".join(item.text), self.found) if item.done and self.found else []

    # ----- building it from deltas, with the events of a stream ------------------------------------------------

    def started(self) -> list[ResponseStreamEvent]:
        """The opening events, and the file search's (done before the answer began) where there was one."""
        return [ResponseCreatedEvent(type="response.created", response=self.response(), sequence_number=self._next()),
                ResponseInProgressEvent(type="response.in_progress", response=self.response(),
                                        sequence_number=self._next()),
                *self._searched()]

    def _searched(self) -> list[ResponseStreamEvent]:
        """The file search's item, output first, with its events, the first time anything is written."""
        item, self._search = self._search, None
        if item is None:
            return []
        self.items.append(item)
        index = len(self.items) - 1
        events: list[ResponseStreamEvent] = [ResponseOutputItemAddedEvent(
            type="response.output_item.added", item=self._file_search_call(item, "in_progress"),
            output_index=index, sequence_number=self._next())]
        for phase, kind in (("in_progress", ResponseFileSearchCallInProgressEvent),
                            ("searching", ResponseFileSearchCallSearchingEvent),
                            ("completed", ResponseFileSearchCallCompletedEvent)):
            events.append(kind(type=f"response.file_search_call.{phase}",  # type: ignore[arg-type]
                               item_id=item.id, output_index=index, sequence_number=self._next()))
        events.append(ResponseOutputItemDoneEvent(type="response.output_item.done", item=self._model(item),
                                                  output_index=index, sequence_number=self._next()))
        return events

    def add(self, delta: Delta) -> list[ResponseStreamEvent]:
        """What one delta adds: its thought, its text, its tool-call pieces, each to its item."""
        self.metrics = delta.metrics
        events = self._searched()
        if delta.thinking:
            events += self._append("reasoning", delta.thinking)
        if delta.text:
            events += self._append("message", delta.text)
        for fragment in delta.call_fragments:
            events += self._call_piece(fragment)
        return events

    def finish(self, last: Delta | None) -> list[ResponseStreamEvent]:
        """The end: items closed (calls with their final arguments), status and usage, the closing event."""
        searched = self._searched()
        if last is not None:
            self.metrics = last.metrics
            for index, call in enumerate(last.tool_calls):  # the calls as parsed: their arguments normalized
                item = self._calls.get(index)
                if item is not None and item.name:
                    item.text = [json.dumps(call.arguments, ensure_ascii=False)]
        self.status = "incomplete" if last is not None and last.finish_reason == "length" else "completed"
        events = [*searched, *self._close_open()]
        closing = ResponseIncompleteEvent if self.status == "incomplete" else ResponseCompletedEvent
        events.append(closing(type=f"response.{self.status}", response=self.response(),  # type: ignore[arg-type]
                              sequence_number=self._next()))
        return events

    def fail(self, message: str) -> list[ResponseStreamEvent]:
        self.status, self.error = "failed", message
        return [*self._searched(), *self._close_open(),
                ResponseFailedEvent(type="response.failed", response=self.response(), sequence_number=self._next())]

    def _append(self, kind: Literal["reasoning", "message"], text: str) -> list[ResponseStreamEvent]:
        events: list[ResponseStreamEvent] = []
        current = self.items[-1] if self.items and not self.items[-1].done else None
        if current is None or current.kind != kind:
            events += self._close_open()
            current = _Item(kind, new_id("rs" if kind == "reasoning" else "msg"))
            events += self._open(current)
        current.text.append(text)
        index = len(self.items) - 1
        if kind == "reasoning":
            events.append(ResponseReasoningTextDeltaEvent(type="response.reasoning_text.delta", item_id=current.id,
                                                          output_index=index, content_index=0, delta=text,
                                                          sequence_number=self._next()))
        else:
            events.append(ResponseTextDeltaEvent(type="response.output_text.delta", item_id=current.id,
                                                 output_index=index, content_index=0, delta=text, logprobs=[],
                                                 sequence_number=self._next()))
        return events

    def _call_piece(self, fragment: CallFragment) -> list[ResponseStreamEvent]:
        events: list[ResponseStreamEvent] = []
        item = self._calls.get(fragment.index)
        if item is None:
            namespace, name = self.tools.origin(fragment.name or "")
            item = _Item("function_call", new_id("fc"), call_id=fragment.id or new_id("call"), name=name,
                         namespace=namespace)
            self._calls[fragment.index] = item
            events += self._close_open()
            events += self._open(item)
        if fragment.arguments:
            item.text.append(fragment.arguments)
            events.append(ResponseFunctionCallArgumentsDeltaEvent(
                type="response.function_call_arguments.delta", item_id=item.id, output_index=self.items.index(item),
                delta=fragment.arguments, sequence_number=self._next()))
        return events

    def _open(self, item: _Item) -> list[ResponseStreamEvent]:
        self.items.append(item)
        index = len(self.items) - 1
        events: list[ResponseStreamEvent] = [ResponseOutputItemAddedEvent(
            type="response.output_item.added", item=self._model(item), output_index=index,
            sequence_number=self._next())]
        if item.kind == "message":
            events.append(ResponseContentPartAddedEvent(
                type="response.content_part.added", item_id=item.id, output_index=index, content_index=0,
                part=ResponseOutputText(type="output_text", text="", annotations=[], logprobs=[]),
                sequence_number=self._next()))
        return events

    def _close_open(self) -> list[ResponseStreamEvent]:
        """Close every item still open (a message or thought when something else begins; all at the end)."""
        events: list[ResponseStreamEvent] = []
        for index, item in enumerate(self.items):
            if item.done:
                continue
            item.done = True
            text = "".join(item.text)
            if item.kind == "reasoning":
                events.append(ResponseReasoningTextDoneEvent(type="response.reasoning_text.done", item_id=item.id,
                                                             output_index=index, content_index=0, text=text,
                                                             sequence_number=self._next()))
            elif item.kind == "message":
                for position, annotation in enumerate(self._citations(item)):
                    events.append(ResponseOutputTextAnnotationAddedEvent(
                        type="response.output_text.annotation.added", item_id=item.id, output_index=index,
                        content_index=0, annotation_index=position, annotation=annotation.model_dump(),
                        sequence_number=self._next()))
                events.append(ResponseTextDoneEvent(type="response.output_text.done", item_id=item.id,
                                                    output_index=index, content_index=0, text=text, logprobs=[],
                                                    sequence_number=self._next()))
                events.append(ResponseContentPartDoneEvent(
                    type="response.content_part.done", item_id=item.id, output_index=index, content_index=0,
                    part=ResponseOutputText(type="output_text", text=text, annotations=self._citations(item),
                                            logprobs=[]),
                    sequence_number=self._next()))
            else:
                events.append(ResponseFunctionCallArgumentsDoneEvent(
                    type="response.function_call_arguments.done", item_id=item.id, output_index=index,
                    arguments=text, sequence_number=self._next()))
            events.append(ResponseOutputItemDoneEvent(type="response.output_item.done", item=self._model(item),
                                                      output_index=index, sequence_number=self._next()))
        return events

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence - 1
