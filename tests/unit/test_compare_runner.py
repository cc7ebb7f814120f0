"""Compare's runner (app/compare/compare_run.py): one conversation to several targets at once, each on its own thread
with its own copy of the conversation, tool loop and Stop; what each came to (app/compare/results.py); and the shared
clients (app/clients/pool.py).

Scripted clients (tests/fake_client.py) show the logic exactly: targets that meet mid-answer at a barrier (they can
only if both stream at the same time), a Stop in one while the other waits to go on. The tiny random model shows
the same on a real engine: two targets on one loaded model, decoded together by continuous batching."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from app.agent.loop import AnswerDone, Decision, Notice, TextDelta, ToolSettings, TurnDone, TurnError
from app.clients.client_protocol import ClientError, Delta, GenerationParams
from app.clients.memory_fit import check_fit
from app.clients.pool import ClientPool
from app.compare.compare_run import RunFinished, run_all, start_comparison
from app.compare.targets import Target, TargetsError
from app.config import ModelSettings
from app.domain.conversation import CallFragment, Conversation, Message, ToolCall
from app.tools import load_tools
from tests.fake_client import ScriptedClient, call_reply, text_reply

PARAMS = GenerationParams(temperature=0.0, max_new_tokens=64)
registry = load_tools()


def settings(name: str) -> ModelSettings:
    """Settings of a model of its own (targets on equal settings share a client)."""
    return ModelSettings(model_path=f"/models/{name}")


def target(name: str, **fields: Any) -> Target:
    return Target(name, settings(name), fields.pop("params", PARAMS), **fields)


def clients_by_name(**clients: ScriptedClient) -> Callable[[ModelSettings], ScriptedClient]:
    by_settings = {settings(name): client for name, client in clients.items()}
    return lambda wanted: by_settings[wanted]


def question() -> Conversation:
    return Conversation([Message("user", "What is 6 * 7?")])


class GatedClient(ScriptedClient):
    """A scripted client whose replies pause after their first delta until `gate(reply_number)` returns: the stream is
    then mid-answer, its first piece delivered and the rest to come."""

    def __init__(self, replies: list[Any], gate: Callable[[int], None]) -> None:
        super().__init__(replies)
        self.gate = gate
        self.streams = 0

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Delta]:  # type: ignore[override]
        inner = super().stream(*args, **kwargs)
        number, self.streams = self.streams, self.streams + 1

        def gated() -> Iterator[Delta]:
            with closing(inner):
                for position, delta in enumerate(inner):
                    yield delta
                    if position == 0:
                        self.gate(number)

        return gated()


def events_by_target(comparison, timeout_s: float = 30) -> list[list[Any]]:
    """Read every target's events as a page would (next_events), until every target has finished."""
    seen: list[list[Any]] = [[] for _ in comparison.runs]
    deadline = time.monotonic() + timeout_s
    while not all(items and isinstance(items[-1], RunFinished) for items in seen):
        assert time.monotonic() < deadline, "the comparison did not finish"
        for index, item in comparison.next_events(timeout=0.5):
            seen[index].append(item)
    return seen


# ----- concurrency and Stop -----------------------------------------------------------------------------------------

def test_two_targets_stream_at_the_same_time_each_on_its_own_copy_of_the_conversation():
    # Each reply waits after its first piece until the other target's reply has started too: if the targets ran one
    # after the other, the first would wait for ever (here: fail after 10 s) and never finish.
    meeting = threading.Barrier(2, timeout=10)
    met: list[str] = []

    def meet(name: str) -> Callable[[int], None]:
        def gate(_: int) -> None:
            meeting.wait()
            met.append(name)
        return gate

    left = GatedClient([text_reply("Six ", "times ", "seven ", "is 42.")], meet("left"))
    right = GatedClient([text_reply("42", ", of course.")], meet("right"))
    conversation = question()
    comparison = start_comparison([target("left"), target("right")], conversation,
                                  clients_by_name(left=left, right=right))
    seen = events_by_target(comparison)
    assert sorted(met) == ["left", "right"]  # both were mid-answer at the barrier, together
    results = comparison.results()
    assert [(r.label, r.answer, r.error, r.finish_reason) for r in results] == [
        ("left", "Six times seven is 42.", None, "stop"), ("right", "42, of course.", None, "stop")]
    assert [r.metrics.completion_tokens for r in results] == [4, 2]
    assert all(r.metrics.time_to_first_token_s is not None for r in results)
    # The events a page draws: each target's text as it came, then its end.
    texts = [[e.text for e in events if isinstance(e, TextDelta)] for events in seen]
    assert texts == [["Six ", "times ", "seven ", "is 42."], ["42", ", of course."]]
    assert all(isinstance(events[-2], TurnDone) for events in seen)
    # Each answered its own copy; the conversation given is untouched.
    assert [m.role for m in conversation.messages] == ["user"]
    assert [[m.content for m in run.conversation.messages] for run in comparison.runs] == [
        ["What is 6 * 7?", "Six times seven is 42."], ["What is 6 * 7?", "42, of course."]]
    assert comparison.done and comparison.wait(0)


def test_stopping_one_target_leaves_the_others_to_finish():
    left_may_go, right_may_go = threading.Event(), threading.Event()
    left = GatedClient([text_reply("I will ", "say ", "a lot ", "more.")], lambda _: left_may_go.wait(10))
    right = GatedClient([text_reply("Still ", "going, ", "to the end.")], lambda _: right_may_go.wait(10))
    comparison = start_comparison([target("left"), target("right")], question(),
                                  clients_by_name(left=left, right=right))
    started: set[int] = set()
    while started != {0, 1}:  # both mid-answer
        started |= {index for index, item in comparison.next_events(timeout=5) if isinstance(item, TextDelta)}
    comparison.stop(0)
    left_may_go.set()
    assert comparison.runs[0].wait(10)
    assert not comparison.runs[1].done  # the other is still mid-answer, not stopped with it
    right_may_go.set()
    assert comparison.wait(10)
    left_result, right_result = comparison.results()
    assert (left_result.answer, left_result.stopped, left_result.error) == ("I will", True, None)
    assert left_result.metrics.completion_tokens == 1
    assert (right_result.answer, right_result.finish_reason) == ("Still going, to the end.", "stop")
    assert not comparison.runs[1].cancel.is_set()
    assert left.requests[0].cancel.is_set() and not right.requests[0].cancel.is_set()
    # What the stopped target wrote is kept in its conversation, marked stopped.
    assert comparison.runs[0].conversation.messages[-1].stopped


def test_a_target_whose_model_does_not_load_fails_alone():
    def client_for(wanted: ModelSettings) -> ScriptedClient:
        if wanted == settings("broken"):
            raise ClientError("No model folder at /models/broken.")
        return ScriptedClient([text_reply("Fine.")])

    broken, fine = run_all([target("broken"), target("fine")], question(), client_for)
    assert (broken.error, broken.finish_reason, broken.answer) == ("No model folder at /models/broken.", "error", "")
    assert (fine.error, fine.answer) == (None, "Fine.")


def test_run_all_stops_what_runs_past_its_time_limit():
    # The slow reply waits mid-answer until it is told to stop, as a real engine notices Stop between tokens.
    slow = GatedClient([text_reply("Slow ", "answer.")], lambda _: slow.requests[0].cancel.wait(30))
    fast = ScriptedClient([text_reply("Quick.")])
    started = time.monotonic()
    slow_result, fast_result = run_all([target("slow"), target("fast")], question(),
                                       clients_by_name(slow=slow, fast=fast), timeout_s=0.5)
    assert time.monotonic() - started < 10
    assert (slow_result.answer, slow_result.stopped) == ("Slow", True)
    assert (fast_result.answer, fast_result.stopped) == ("Quick.", False)


def test_a_comparison_takes_one_to_four_targets_with_their_own_labels():
    client = ScriptedClient()
    with pytest.raises(TargetsError, match="1 to 4 targets, not 5"):
        start_comparison([target(f"t{i}") for i in range(5)], question(), lambda _: client)
    with pytest.raises(TargetsError, match="used twice"):
        start_comparison([target("same"), target("same")], question(), lambda _: client)


# ----- tool calls compared ------------------------------------------------------------------------------------------

def test_each_targets_tool_calls_are_checked_parsed_valid_and_how_they_ran():
    forced = ScriptedClient([call_reply(ToolCall("calculator", {"expression": "6 * 7"})), text_reply("It is 42.")])
    # An OpenAI-compatible server that streamed a call whose arguments never became JSON: no call came of it.
    malformed = ScriptedClient([[
        Delta(call_fragments=[CallFragment(0, id="call_x", name="calculator")]),
        Delta(call_fragments=[CallFragment(0, '{"expression": "6 *')]),
        Delta(notice="The server sent tool calls that could not be used: calculator (arguments are not valid JSON).",
              finish_reason="stop"),
    ]])
    off_schema = ScriptedClient([call_reply(ToolCall("calculator", {"expr": "6 * 7"})), text_reply("Oops.")])
    unknown = ScriptedClient([call_reply(ToolCall("launch_rocket", {})), text_reply("No rocket.")])
    tools = ToolSettings(registry.subset(["calculator"]), choice="calculator", max_rounds=2)
    targets = [target("forced"), target("malformed", tool_choice="auto"), target("off_schema"), target("unknown")]
    results = run_all(targets, question(), clients_by_name(forced=forced, malformed=malformed,
                                                              off_schema=off_schema, unknown=unknown), tools)
    by_label = {result.label: result for result in results}

    [call] = by_label["forced"].calls
    assert (call.name, call.arguments, call.parsed, call.schema_valid, call.status) == (
        "calculator", {"expression": "6 * 7"}, True, True, "ok")
    assert "42" in call.result and call.duration_s is not None and call.round == 0
    assert by_label["forced"].answer == "It is 42." and by_label["forced"].metrics.generations == 2

    [call] = by_label["malformed"].calls
    assert (call.name, call.arguments, call.arguments_text, call.parsed, call.schema_valid, call.status) == (
        "calculator", None, '{"expression": "6 *', False, None, None)
    assert not call.valid and by_label["malformed"].metrics.generations == 1
    assert malformed.requests[0].tool_choice == "auto"  # the target's own choice over the shared one

    [call] = by_label["off_schema"].calls
    assert (call.parsed, call.schema_valid, call.status) == (True, False, "failed")
    assert "invalid arguments for calculator" in (call.schema_error or "")
    assert "invalid arguments" in call.result  # the registry refused to run it, and the model read why

    [call] = by_label["unknown"].calls
    assert (call.name, call.parsed, call.schema_valid, call.status) == ("launch_rocket", True, False, "failed")
    assert "no tool named 'launch_rocket'" in (call.schema_error or "")

    report = by_label["forced"].to_json()["tool_calls"][0]
    assert {key: report[key] for key in ("name", "parsed", "schema_valid", "status")} == {
        "name": "calculator", "parsed": True, "schema_valid": True, "status": "ok"}


def test_a_call_that_asks_first_waits_and_does_not_run():
    client = ScriptedClient([call_reply(ToolCall("count_words", {"text": "one two"}))])
    tools = ToolSettings(registry.subset(["count_words"]), choice="count_words", policies={"count_words": "ask"})
    [result] = run_all([target("asker")], question(), clients_by_name(asker=client), tools)
    [call] = result.calls
    assert (call.parsed, call.schema_valid, call.status, call.result) == (True, True, "waiting", "")


def test_a_targets_tool_choice_overrides_the_shared_one_or_fails_that_target_alone():
    tools = ToolSettings(registry.subset(["calculator"]), choice="calculator")
    plain = ScriptedClient([text_reply("No tools for me.")])
    shared = ScriptedClient([call_reply(ToolCall("calculator", {"expression": "1 + 1"})), text_reply("2.")])
    required = ScriptedClient([call_reply(ToolCall("calculator", {"expression": "2"})), text_reply("2")])
    targets = [target("plain", tool_choice="none"), target("shared"), target("weather", tool_choice="get_weather"),
               target("required", tool_choice="required")]
    results = run_all(targets, question(), clients_by_name(plain=plain, shared=shared, weather=ScriptedClient(),
                                                           required=required), tools)
    assert plain.requests[0].tool_choice == "none" and results[0].answer == "No tools for me."
    assert shared.requests[0].tool_choice == "calculator" and results[1].calls[0].status == "ok"
    assert results[2].error == "tool_choice 'get_weather' names a tool that is not on (on: calculator)"
    assert results[3].error is None and results[3].calls[0].valid
    # Without any tools on, a target cannot require a call.
    [alone] = run_all([target("required", tool_choice="required")], question(),
                      clients_by_name(required=ScriptedClient()))
    assert alone.error == "tool_choice 'required' needs at least one tool, and no tool is on"


# ----- shared clients -----------------------------------------------------------------------------------------------

def test_targets_on_the_same_model_share_one_client_loaded_once():
    loads: list[ModelSettings] = []

    def factory(wanted: ModelSettings) -> ScriptedClient:
        loads.append(wanted)
        time.sleep(0.2)  # a load that takes a while: the second target must wait for it, not load again
        return ScriptedClient([text_reply("Hello."), text_reply("Hi.")])

    pool = ClientPool(factory)
    same = settings("shared")
    results = run_all([Target("cold", same, PARAMS), Target("hot", same, GenerationParams(temperature=1.0))],
                      question(), pool.get)
    assert loads == [same] and list(pool.loaded()) == [same]
    client = pool.loaded()[same]
    assert sorted(r.answer for r in results) == ["Hello.", "Hi."]
    assert sorted(request.params.temperature for request in client.requests) == [0.0, 1.0]
    other = pool.get(settings("other"))
    assert loads == [same, settings("other")]
    assert pool.unload(settings("other")) and other.closed and list(pool.loaded()) == [same]
    assert not pool.unload(settings("other"))  # gone already
    pool.close()
    assert client.closed and pool.loaded() == {}


def test_a_failed_load_is_not_kept():
    attempts = []

    def factory(wanted: ModelSettings) -> ScriptedClient:
        attempts.append(wanted)
        if len(attempts) == 1:
            raise ClientError("out of memory")
        return ScriptedClient()

    pool = ClientPool(factory)
    with pytest.raises(ClientError):
        pool.get(settings("x"))
    assert isinstance(pool.get(settings("x")), ScriptedClient) and len(attempts) == 2


def test_a_holder_keeps_one_model_and_switching_releases_the_previous():
    """The model picker (or the API server) holds one model: switching closes the previous one; a failed load
    leaves it as it was; the model is loaded from the settings as spelled (its name is its folder's), unchecked."""
    loads: list[ModelSettings] = []

    def factory(wanted: ModelSettings) -> ScriptedClient:
        loads.append(wanted)
        if wanted.model_path.endswith("broken"):
            raise ClientError("no weights")
        return ScriptedClient()

    def refuse(wanted: ModelSettings, held: object) -> None:
        raise AssertionError("a held model is the user's choice: not checked")

    pool = ClientPool(factory, fits=refuse)
    spelled = ModelSettings(model_path="/models/./first/")
    first = pool.hold("picker", spelled)
    assert loads == [spelled] and pool.holds("picker", settings("first")) and pool.held("picker") == settings("first")
    assert pool.hold("picker", settings("first")) is first and len(loads) == 1  # held already: not loaded again
    with pytest.raises(ClientError, match="no weights"):
        pool.hold("picker", settings("broken"))
    assert not first.closed and pool.holds("picker", settings("first"))
    second = pool.hold("picker", settings("second"))
    assert first.closed and list(pool.loaded()) == [settings("second")] and pool.holds("picker", settings("second"))
    assert not pool.unload(settings("second"))  # not Compare's to unload
    pool.close()
    assert second.closed and pool.loaded() == {} and pool.held("picker") is None


def test_the_held_model_and_the_targets_share_one_client_closed_by_the_last_user():
    """A Compare target on the picker's model, and the picker on a target's model, share the one loaded client: the
    picker switching away leaves a target's model loaded, Unload leaves the picker's, and the memory check of a
    target counts the picker's model."""
    loads: list[ModelSettings] = []
    checked: list[set[ModelSettings]] = []

    def factory(wanted: ModelSettings) -> ScriptedClient:
        loads.append(wanted)
        return ScriptedClient()

    pool = ClientPool(factory, fits=lambda wanted, held: checked.append(set(held)))
    held = pool.hold("picker", settings("a"))
    assert pool.get(settings("a")) is held and loads == [settings("a")] and checked == []
    target = pool.get(settings("b"))
    assert checked == [{settings("a")}]  # the picker's model is counted
    assert pool.hold("picker", settings("b")) is target and loads == [settings("a"), settings("b")]
    assert not held.closed  # a target still uses it
    assert pool.unload(settings("b")) and not target.closed  # the picker still holds it
    assert pool.unload(settings("a")) and held.closed and list(pool.loaded()) == [settings("b")]
    pool.hold("other holder", settings("b"))
    pool.hold("picker", settings("c"))
    assert not target.closed  # the other holder still holds it
    pool.hold("other holder", settings("c"))
    assert target.closed and list(pool.loaded()) == [settings("c")]
    pool.close()


def test_one_model_spelled_five_ways_is_loaded_once(tiny_model_dir, tmp_path):
    """/x/model, /x/model/, /x/./model, /x/y/../model and a symbolic link name one model: one engine, not five."""
    link = tmp_path / "link-to-model"
    link.symlink_to(tiny_model_dir, target_is_directory=True)
    folder, parent, name = str(tiny_model_dir), tiny_model_dir.parent, tiny_model_dir.name
    spellings = [folder, folder + "/", f"{parent}/./{name}", f"{parent}/{name}/../{name}", str(link)]
    pool = ClientPool()
    try:
        targets = [Target(f"t{n}", ModelSettings(model_path=path, device="cpu", dtype="float32"),
                          GenerationParams(max_new_tokens=4)) for n, path in enumerate(spellings[:4])]
        results = run_all(targets, question(), pool.get, timeout_s=120)
        assert [r.error for r in results] == [None] * 4
        assert pool.get(ModelSettings(model_path=spellings[4], device="cpu", dtype="float32")) is \
            next(iter(pool.loaded().values()))
        assert [s.model_path for s in pool.loaded()] == [os.path.realpath(tiny_model_dir)]
        assert pool.unload(ModelSettings(model_path=str(link), device="cpu", dtype="float32"))
        assert pool.loaded() == {}
    finally:
        pool.close()


def test_one_tabs_targets_take_at_most_half_of_a_shared_engine(tiny_model_dir):
    """Four targets of one tab on one engine that writes four answers at once: two answer together, two wait their
    turn, and another tab's (or the API's) request finds a free slot at once instead of queueing behind them all."""
    pool = ClientPool()
    try:
        settings_ = ModelSettings(model_path=str(tiny_model_dir), device="cpu", dtype="float32", hf_max_batch=4)
        targets = [Target(f"t{n}", settings_, GenerationParams(temperature=0.0, max_new_tokens=64, ignore_eos=True))
                   for n in range(4)]
        client = pool.get(settings_)
        comparison = start_comparison(targets, question(), pool.get)
        generating: list[int] = []
        outsider = threading.Thread(target=lambda: list(client.stream(
            [{"role": "user", "content": "Hi"}], GenerationParams(max_new_tokens=8, ignore_eos=True),
            threading.Event())))
        outsider_done_first = False
        while not comparison.done:
            activity = client.activity()
            assert activity is not None
            generating.append(activity.generating)
            if activity.generating >= 1 and not outsider.is_alive() and outsider.ident is None:
                outsider.start()
            outsider_done_first = outsider_done_first or (outsider.ident is not None and not outsider.is_alive())
            time.sleep(0.02)
        assert comparison.wait(120)
        assert [r.error for r in comparison.results()] == [None] * 4
        assert all(r.metrics.completion_tokens == 64 for r in comparison.results())
        assert max(generating) <= 3  # two of the tab's, and at most the outsider beside them
        # Its 8 tokens are written beside the tab's first two answers, not after all four (as when the tab's targets
        # held every slot): a step-by-step "waiting" count was too fine a measure on a busy machine.
        assert outsider_done_first
        notices = [item for run in comparison.runs for item in run.drain() if isinstance(item, Notice)]
        assert len(notices) == 2 and "Waiting" in notices[0].text
    finally:
        pool.close()


def sparse_model(folder: Path, size: int) -> ModelSettings:
    """A model folder whose float16 weights take `size` bytes on paper and none on disk."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "float16"}))
    with open(folder / "model.safetensors", "wb") as weights:
        weights.truncate(size)
    return ModelSettings(model_path=str(folder), device="cpu", dtype="float16")


def test_the_pool_counts_what_it_holds_and_what_loads_not_just_what_is_free(tmp_path):
    """Free memory that does not fall as models load (a mapped file; a model still loading; another tab sending at
    the same moment) let every send take 90% of it again. The pool checks each model against the estimates of the
    models it holds or is loading: on a 4 GB machine (80%: 3.2 GB for models) two 1.2 GB models, not a third."""
    GB = 10**9
    fits = partial(check_fit, free=lambda place: 3 * GB if place == "RAM" else None,
                   total=lambda place: 4 * GB if place == "RAM" else None)
    first, second, third = (sparse_model(tmp_path / name, GB) for name in ("first", "second", "third"))
    loading, release = threading.Event(), threading.Event()

    def factory(wanted: ModelSettings) -> ScriptedClient:
        if wanted.model_path.endswith("second"):
            loading.set()
            release.wait(10)
        return ScriptedClient()

    pool = ClientPool(factory, fits=lambda wanted, held: fits([wanted], held))
    pool.get(first)
    second_loads = threading.Thread(target=pool.get, args=(second,))
    second_loads.start()
    assert loading.wait(10)
    with pytest.raises(ClientError, match=r"1.2 GB of RAM on top of the 2.4 GB .*at most 80% of the 4.0 GB RAM"):
        pool.get(third)  # the second is still loading: its memory is spoken for
    release.set()
    second_loads.join(10)
    assert len(pool.loaded()) == 2
    with pytest.raises(ClientError, match="Unload a model"):
        pool.get(third)
    assert pool.unload(first)
    assert pool.get(third) is not None and len(pool.loaded()) == 2


# ----- on a real engine: the tiny random model, two targets on one loaded model --------------------------------------

def tiny_target(label: str, model_dir: Path, **params: Any) -> Target:
    return Target(label, ModelSettings(model_path=str(model_dir), device="cpu", dtype="float32"),
                  GenerationParams(**params))


def test_two_targets_on_one_tiny_model_are_decoded_together(tiny_model_dir):
    pool = ClientPool()
    try:
        # Long enough for many reads of the events: a test thread held up for a moment (a loaded machine) drains
        # each target's pieces in a run, which must still leave them interleaved over the whole answers.
        targets = [tiny_target("greedy", tiny_model_dir, temperature=0.0, max_new_tokens=160, ignore_eos=True),
                   tiny_target("hot", tiny_model_dir, temperature=1.0, seed=3, max_new_tokens=160, ignore_eos=True)]
        pool.get(targets[0].settings)  # loaded before the clock starts
        comparison = start_comparison(targets, Conversation([Message("user", "Tell me a story.")]), pool.get)
        arrivals: list[tuple[float, int]] = []
        deadline = time.monotonic() + 120
        while not comparison.done or any(not run.events.empty() for run in comparison.runs):
            assert time.monotonic() < deadline
            for index, item in comparison.next_events(timeout=0.5):
                if isinstance(item, TextDelta):
                    arrivals.append((time.perf_counter(), index))
        results = comparison.results()
        assert len(pool.loaded()) == 1  # one engine for both
        assert [(r.error, r.finish_reason, r.metrics.completion_tokens) for r in results] == [(None, "length", 160)] * 2
        first = {index: min(t for t, i in arrivals if i == index) for index in (0, 1)}
        last = {index: max(t for t, i in arrivals if i == index) for index in (0, 1)}
        # Both mid-answer at once: each began before the other ended ...
        assert first[0] < last[1] and first[1] < last[0]
        # ... and their pieces came interleaved, not one answer and then the other.
        order = [index for _, index in sorted(arrivals)]
        switches = sum(a != b for a, b in zip(order, order[1:], strict=False))
        assert switches >= 4, order
        assert results[0].answer != results[1].answer  # each with its own sampling settings
    finally:
        pool.close()


def test_stopping_one_target_on_a_tiny_model_leaves_the_other_to_its_end(tiny_model_dir):
    pool = ClientPool()
    try:
        # Far more than the tiny model writes while the test thread reads its first piece and presses Stop.
        targets = [tiny_target("stopped", tiny_model_dir, temperature=0.0, max_new_tokens=5000, ignore_eos=True),
                   tiny_target("goes on", tiny_model_dir, temperature=0.0, max_new_tokens=60, ignore_eos=True,
                               seed=1)]
        pool.get(targets[0].settings)
        comparison = start_comparison(targets, Conversation([Message("user", "Count to a hundred.")]), pool.get)
        deadline = time.monotonic() + 120
        while not any(index == 0 and isinstance(item, TextDelta) for index, item in comparison.next_events(0.5)):
            assert time.monotonic() < deadline
        comparison.stop(0)
        assert comparison.wait(120)
        stopped, finished = comparison.results()
        assert stopped.stopped and stopped.error is None and 0 < stopped.metrics.completion_tokens < 5000
        assert (finished.finish_reason, finished.metrics.completion_tokens, finished.error) == ("length", 60, None)
        ends = [[e for e in run.drain() if isinstance(e, AnswerDone | TurnError)] for run in comparison.runs]
        assert all(not any(isinstance(e, TurnError) for e in events) for events in ends)
    finally:
        pool.close()


def test_a_target_stopped_while_its_model_loads_answers_nothing():
    loading, may_finish = threading.Event(), threading.Event()
    client = ScriptedClient([text_reply("Too late.")])

    def slow_load(_: ModelSettings) -> ScriptedClient:
        loading.set()
        may_finish.wait(10)
        return client

    comparison = start_comparison([target("slow")], question(), slow_load)
    assert loading.wait(10)
    comparison.close()
    may_finish.set()
    assert comparison.wait(10)
    [result] = comparison.results()
    assert (result.stopped, result.answer, result.error, client.requests) == (True, "", None, [])


def asks_first() -> ToolSettings:
    return ToolSettings(registry.subset(["count_words"]), choice="count_words", policies={"count_words": "ask"})


def test_a_pane_whose_calls_waited_goes_on_alone_once_decided():
    first = ScriptedClient([call_reply(ToolCall("count_words", {"text": "one two"})), text_reply("Two words.")])
    second = ScriptedClient([call_reply(ToolCall("count_words", {"text": "a b c"})), text_reply("Three.")])
    client_for = clients_by_name(first=first, second=second)
    comparison = start_comparison([target("first"), target("second")], question(), client_for, asks_first())
    assert comparison.wait(10)
    waiting = [run.waiting for run in comparison.runs]
    assert [len(calls) for calls in waiting] == [1, 1]
    with pytest.raises(ValueError, match="no waiting tool call"):  # refused at once, nothing runs
        comparison.resume(0, {"nope": Decision("run")}, client_for, asks_first())
    with pytest.raises(ValueError, match="needs a decision"):
        comparison.resume(0, {}, client_for, asks_first())

    comparison.resume(0, {waiting[0][0].id: Decision("run")}, client_for, asks_first())
    assert comparison.wait(10)
    done, still = comparison.runs
    assert [m.role for m in done.conversation.messages] == ["user", "assistant", "tool", "assistant"]
    assert done.result.answer == "Two words." and len(done.result.generations) == 2
    assert [(c.status, c.result) for c in done.result.calls] == [("ok", "2 words, 7 characters")]
    assert still.waiting == waiting[1] and still.result.calls[0].status == "waiting"  # untouched

    comparison.resume(1, {waiting[1][0].id: Decision("deny", reason="not now")}, client_for, asks_first())
    assert comparison.wait(10)
    assert comparison.runs[1].result.calls[0].status == "denied"
    assert comparison.runs[1].conversation.messages[2].content == "The user declined to run this call: not now"


def test_each_target_can_go_on_from_its_own_conversation():
    clients = {name: ScriptedClient([text_reply(f"{name} again.")]) for name in ("first", "second")}
    histories = [Conversation([Message("user", "Hi"), Message("assistant", f"{name} said hi."),
                               Message("user", "And now?")]) for name in ("first", "second")]
    comparison = start_comparison([target("first"), target("second")], histories, clients_by_name(**clients))
    assert comparison.wait(10)
    for name, client in clients.items():
        [request] = client.requests
        assert [m["content"] for m in request.messages if m["role"] != "system"] == ["Hi", f"{name} said hi.",
                                                                                     "And now?"]
    assert [run.conversation.messages[-1].content for run in comparison.runs] == ["first again.", "second again."]
    assert [len(h.messages) for h in histories] == [3, 3]  # each ran on a copy
    with pytest.raises(ValueError, match="2 targets but 1 conversations"):
        start_comparison([target("first"), target("second")], histories[:1], clients_by_name())


def test_a_question_from_a_tool_is_declined_and_the_call_finishes():
    from app.tools.questions import Question, current_channel
    from app.tools.tool_registry import ToolRegistry

    asked: list[str] = []

    def book_table(guests: int) -> str:
        """Book a table.

        Args:
            guests: how many
        """
        channel = current_channel()
        assert channel is not None
        answer = channel.ask(Question("Which time?", {"type": "object", "properties": {"time": {"type": "string"}}}))
        given = answer.answer.result(timeout=10)
        asked.append(given.action)
        return f"not booked: the user said {given.action}"

    tools_registry = ToolRegistry()
    tools_registry.register(book_table)
    tools = ToolSettings(tools_registry, choice="book_table", policies={"book_table": "auto"})
    client = ScriptedClient([call_reply(ToolCall("book_table", {"guests": 2})), text_reply("Sorry.")])
    [result] = run_all([target("booker")], question(), clients_by_name(booker=client), tools, timeout_s=20)
    assert asked == ["decline"]
    assert [(c.status, c.result) for c in result.calls] == [("ok", "not booked: the user said decline")]
    assert result.answer == "Sorry." and result.error is None
