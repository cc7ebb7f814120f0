"""The same conversation sent to several targets at once.

Each target gets its own copy of the conversation and its own turn through the agent (app/agent/loop.py: run_turn, with
its own tool loop), on a thread of its own with its own cancel Event: their answers stream at the same time
(targets that share a model share its engine, whose batching serves them together, up to half of what it writes at
once: EngineShares), and stopping one leaves the others running.

A front end reads each target's events from its queue (`TargetRun.events`: the agent's TurnEvents, then one
RunFinished), all of them at once with `Comparison.next_events`; `run_all` runs a comparison to its end for
headless use. Each target's figures and tool-call checks are collected as its events pass (`TargetRun.result`).
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, replace

from app.agent.loop import (
    Decision,
    Notice,
    QuestionAsked,
    ToolSettings,
    TurnError,
    TurnEvent,
    check_decisions,
    pending_calls,
    resume_turn,
    run_turn,
)
from app.clients.client_protocol import Client, ClientError
from app.compare.results import ResultCollector, TargetResult
from app.compare.targets import MAX_TARGETS, Target, TargetsError, check_targets
from app.config import ModelSettings
from app.domain.conversation import Conversation, ToolCall
from app.prompting.chat_format import ImagePolicy
from app.tools.questions import Answer, answer
from app.tools.tool_registry import RunningCall, ToolRegistry

ClientFor = Callable[[ModelSettings], Client]  # e.g. ClientPool.get: the (shared) client for a target's settings
QUESTION_DECLINED = ("A tool asked a question in the middle of its call; a comparison declines such questions (ask "
                     "it on the Tools page to answer).")


@dataclass(frozen=True)
class RunFinished:
    """The last item of a target's queue: its turn is over and `result` is final."""

    result: TargetResult


QueueItem = TurnEvent | RunFinished


class EngineShares:
    """One comparison's (one tab's) share of each engine it uses: at most half of what the engine writes at once
    (ModelActivity.at_once; at least one) of its targets answer on it together, the others waiting their turn, so
    that one tab comparing four settings of a model does not take every slot of an engine other tabs and the API
    share. A remote server (no activity figure) is not ours to bound."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shares: dict[int, threading.Semaphore] = {}  # by id(client): the clients outlive the comparison

    def share(self, client: Client) -> threading.Semaphore | None:
        activity = client.activity()
        if activity is None:
            return None
        with self._lock:
            return self._shares.setdefault(id(client), threading.Semaphore(max(1, activity.at_once // 2)))


def tools_for(target: Target, tools: ToolSettings | None) -> ToolSettings | None:
    """The tool settings a target's turn runs with: the shared ones, with the target's own tool choice where it has
    one. ValueError when that choice cannot be honoured (a tool that is not on, or a call required of no tools)."""
    choice = target.tool_choice
    if choice is None or (choice == "auto" and tools is None):
        return tools
    if choice == "none":
        return replace(tools, choice="none") if tools is not None else None
    offered = tools.offered.names if tools is not None else []
    if choice == "required" and not offered:
        raise ValueError("tool_choice 'required' needs at least one tool, and no tool is on")
    if choice not in ("auto", "required") and choice not in offered:
        raise ValueError(f"tool_choice {choice!r} names a tool that is not on (on: {', '.join(offered) or 'none'})")
    assert tools is not None
    return replace(tools, choice=choice)


class TargetRun:
    """One target's turn on its own thread. `events` holds what the turn yields, then RunFinished.

    `decisions` (the user's, on the calls that wait for approval in `conversation`) makes it go on with that turn
    (resume_turn) instead of starting one; `collector` then carries on the turn's figures and checks so far."""

    def __init__(self, index: int, target: Target, conversation: Conversation, client_for: ClientFor,
                 tools: ToolSettings | None, images: ImagePolicy | None, signal: threading.Event,
                 decisions: dict[str, Decision] | None = None, collector: ResultCollector | None = None,
                 shares: EngineShares | None = None) -> None:
        self.index = index
        self.target = target
        self.conversation = copy.deepcopy(conversation)  # its own: the turn appends its answers and tool results
        self.cancel = threading.Event()
        self.events: queue.Queue[QueueItem] = queue.Queue()
        self._client_for = client_for
        self._images = images
        self._signal = signal
        self._decisions = decisions
        self._shares = shares or EngineShares()
        self._finished = threading.Event()
        self._problem: str | None = None  # why the target cannot run at all
        if decisions is not None:  # a resumed turn: `tools` are Comparison.resume's, the choice applied already
            self._tools = tools
        else:
            try:
                self._tools = tools_for(target, tools)
            except ValueError as exc:
                self._tools, self._problem = tools, str(exc)
        if collector is None:
            collector = ResultCollector(target.label, self._tools.offered if self._tools is not None else None)
        else:
            collector.carry_on()
        self._collector = collector
        self._thread = threading.Thread(target=self._work, name=f"compare-{index}-{target.label[:20]}", daemon=True)

    @property
    def tools(self) -> ToolSettings | None:
        """The tool settings the turn runs with (the target's own tool choice applied)."""
        return self._tools

    @property
    def collector(self) -> ResultCollector:
        return self._collector

    @property
    def waiting(self) -> list[ToolCall]:
        """Once the turn is over: the calls that wait for the user's approval (empty when none do)."""
        return pending_calls(self.conversation) if self.done else []

    @property
    def result(self) -> TargetResult:
        """What the turn came to so far (final once `done`)."""
        return self._collector.result

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop this target's answer (or its running tool) soon; the others go on. What it wrote so far is kept,
        marked stopped."""
        self.cancel.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the turn is over; False if it is not within `timeout` seconds."""
        return self._finished.wait(timeout)

    def drain(self) -> list[QueueItem]:
        """The events that arrived since the last drain, without waiting."""
        items: list[QueueItem] = []
        while True:
            try:
                items.append(self.events.get_nowait())
            except queue.Empty:
                return items

    def _put(self, item: QueueItem) -> None:
        self.events.put(item)
        self._signal.set()

    def _work(self) -> None:
        collector = self._collector
        try:
            if self._problem is not None:
                raise ClientError(self._problem)
            client = self._client_for(self.target.settings)
            if self.cancel.is_set():  # stopped while its model loaded: nothing to answer
                collector.result.finish_reason = "cancelled"
                return
            share = self._shares.share(client)
            if share is not None and not self._take(share):
                collector.result.finish_reason = "cancelled"  # stopped while it waited for its turn
                return
            try:
                tools = self._tools or ToolSettings(ToolRegistry())
                turn: Generator[TurnEvent, None, None] | None
                if self._decisions is not None:
                    turn = resume_turn(client, self.conversation, self.target.params, self.target.system_prompt,
                                       self.cancel, tools, self._images, self._decisions)
                else:
                    turn = run_turn(client, self.conversation, self.target.params, self.target.system_prompt,
                                    self.cancel, self._tools, self._images)
                while turn is not None:
                    asking = self._stream(turn)
                    turn = None
                    if asking is not None:  # nobody can answer it here: decline, and let the call finish
                        answer(asking.asked, Answer("decline"))
                        self._put(Notice(QUESTION_DECLINED))
                        running: dict[str, RunningCall] = {asking.call.id: asking.running}
                        turn = resume_turn(client, self.conversation, self.target.params, self.target.system_prompt,
                                           self.cancel, tools, self._images, {}, running)
            finally:
                if share is not None:
                    share.release()
        except Exception as exc:  # the model did not load, or a bug: this target fails, the others go on
            text = str(exc) if isinstance(exc, ClientError) else f"{type(exc).__name__}: {exc}"
            collector.error(text)
            self._put(TurnError(text))
        finally:
            result = collector.finish()
            self._put(RunFinished(result))
            self._finished.set()

    def _take(self, share: threading.Semaphore) -> bool:
        """Wait for this tab's turn on the engine (False: stopped while waiting)."""
        if share.acquire(blocking=False):
            return True
        self._put(Notice("Waiting: this tab's other targets on the same model are answering (a tab takes at most "
                         "half of what a model writes at once)."))
        while not self.cancel.is_set():
            if share.acquire(timeout=0.1):
                return True
        return False

    def _stream(self, turn: Generator[TurnEvent, None, None]) -> QuestionAsked | None:
        """Pass the turn's events on; the question that paused it, if one did."""
        asking = None
        with closing(turn):  # closing the generator cancels what still runs
            for event in turn:
                self._collector.observe(event)
                if isinstance(event, QuestionAsked):
                    asking = event
                else:
                    self._put(event)
        return asking


class Comparison:
    """Targets answering one conversation at once; started by `start_comparison`."""

    def __init__(self, runs: list[TargetRun], signal: threading.Event, shares: EngineShares) -> None:
        self.runs = runs
        self._signal = signal
        self._shares = shares

    @property
    def done(self) -> bool:
        return all(run.done for run in self.runs)

    def stop(self, index: int) -> None:
        self.runs[index].stop()

    def stop_all(self) -> None:
        for run in self.runs:
            run.stop()

    def close(self) -> None:
        """Stop every target still running (a page that leaves a comparison closes it: its threads end soon)."""
        self.stop_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every target's turn to end; False if they have not within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for run in self.runs:
            if not run.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
                return False
        return True

    def next_events(self, timeout: float | None = None) -> list[tuple[int, QueueItem]]:
        """Every target's new events as (target index, event), waiting up to `timeout` seconds for the first (an
        empty list when none came). A page calls this in its drawing loop."""
        self._signal.wait(timeout)
        self._signal.clear()  # before draining: anything put from now on sets it again
        return [(run.index, item) for run in self.runs for item in run.drain()]

    def results(self) -> list[TargetResult]:
        return [run.result for run in self.runs]

    def resume(self, index: int, decisions: dict[str, Decision], client_for: ClientFor, tools: ToolSettings | None,
               images: ImagePolicy | None = None) -> TargetRun:
        """Go on with target `index`'s turn, whose calls waited for approval, as `decisions` says (run or deny, by
        call id), on a new thread; the other targets are untouched. `tools`: the page's tool settings as they are
        now, at the user's click, not as they were when the turn began: a call whose tool has been set to Never
        since, or switched off, is refused. ValueError (before anything runs) when its turn is still going, or the
        decisions do not fit the waiting calls or the tools' current policies (resume_turn's checks)."""
        previous = self.runs[index]
        if not previous.done:
            raise ValueError(f"{previous.target.label!r} is still answering")
        current = _current_tools(previous.target, tools)
        for call in previous.waiting:
            decision = decisions.get(call.id)
            if decision is not None and decision.action == "run" and call.name not in current.registry:
                raise ValueError(f"{call.name} is not switched on now: deny the call, or switch the tool on first")
        check_decisions(previous.conversation, current, decisions)  # refused here, not later on the thread
        run = TargetRun(index, previous.target, previous.conversation, client_for, current, images, self._signal,
                        dict(decisions), previous.collector, self._shares)
        self.runs[index] = run
        run.start()
        return run


def _current_tools(target: Target, tools: ToolSettings | None) -> ToolSettings:
    """The tool settings a resumed turn goes on with: the current ones, with the target's tool choice where it can
    still be honoured (it matters for a turn's first generation only, which is past)."""
    try:
        chosen = tools_for(target, tools)
    except ValueError:
        chosen = tools
    return chosen if chosen is not None else ToolSettings(ToolRegistry())


def start_comparison(targets: Sequence[Target], conversation: Conversation | Sequence[Conversation],
                     client_for: ClientFor, tools: ToolSettings | None = None,
                     images: ImagePolicy | None = None) -> Comparison:
    """Start every target's turn on `conversation` (each on a copy; or a list, one conversation per target, each ending
    with the same new user message: a page whose panes went on separately) at once; returns at once. `client_for`
    gives the client for a target's settings (a ClientPool's `get`: targets on equal settings share one); it is
    called on the target's thread, so that loading one model does not hold up a target whose model is loaded.
    `tools`: the tools every target may call (each with its own tool choice, `Target.tool_choice`, where it has
    one)."""
    targets = list(targets)
    check_targets(targets)
    if len(targets) > MAX_TARGETS:  # check_targets says so too; kept next to the threads it limits
        raise TargetsError(f"at most {MAX_TARGETS} targets")
    conversations = [conversation] * len(targets) if isinstance(conversation, Conversation) else list(conversation)
    if len(conversations) != len(targets):
        raise ValueError(f"{len(targets)} targets but {len(conversations)} conversations")
    signal = threading.Event()
    shares = EngineShares()
    runs = [TargetRun(index, target, conversations[index], client_for, tools, images, signal, shares=shares)
            for index, target in enumerate(targets)]
    for run in runs:
        run.start()
    return Comparison(runs, signal, shares)


def run_all(targets: Sequence[Target], conversation: Conversation, client_for: ClientFor,
            tools: ToolSettings | None = None, images: ImagePolicy | None = None,
            timeout_s: float | None = None) -> list[TargetResult]:
    """Run a comparison to its end (headless): every target's result, in the targets' order. Past `timeout_s` every
    target still running is stopped (its result says so); an interruption (Ctrl+C) stops them all too."""
    comparison = start_comparison(targets, conversation, client_for, tools, images)
    try:
        if not comparison.wait(timeout_s):
            comparison.stop_all()
            comparison.wait()
    except BaseException:
        comparison.stop_all()
        raise
    return comparison.results()
