"""Model output and tool-call arguments never crash or stall the parsers (issue 12).

Hostile text is what a model may write and what a client may send: JSON nested thousands deep, integers longer than
Python converts, GLM-4 browser calls that blow up Python's parser, and near-misses of every dialect's markers fed
in small chunks (which made the Hermes parser rescan its whole buffer on every chunk). Every parser must answer
(text, or no call) without raising, give the same answer however the text is chunked, and take time linear in the
length of the text.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.conversation import CallFragment, Conversation, ToolCall
from app.limits.json_limits import MAX_CHARS, MAX_DEPTH, JSONLimitError, loads_bounded, loads_sequence, nesting_depth
from app.prompting.chat_format import NativeCalls
from app.prompting.dialects import DIALECTS, ConstrainedCall, StreamParser
from app.prompting.dialects.dialect import ForcedCallParser

TOOLS = ["get_weather", "calculator", "python", "web_search", "open_url", "mclick"]
hermes, glm4, llama3 = DIALECTS["hermes"], DIALECTS["glm4"], DIALECTS["llama3_json"]

DEEP = "[" * 100_000
BIG_INT = "1" * 5_000  # over Python's 4,300-digit int-string conversion limit


def _tool(name: str, code: bool = False) -> dict:
    properties = {"code": {"type": "string"}} if code else {"city": {"type": "string"}}
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties}}}


def _forced_calls() -> dict[str, list[ConstrainedCall]]:
    """For every dialect: a forced JSON call, a forced code call, and a choice of two JSON calls."""
    options = {}
    for dialect in DIALECTS.values():
        options[f"{dialect.name} json"] = [dialect.constrained_call(_tool("get_weather"))]
        options[f"{dialect.name} code"] = [dialect.constrained_call(_tool("python", code=True))]
        options[f"{dialect.name} choice"] = [dialect.constrained_call(_tool("get_weather")),
                                             dialect.constrained_call(_tool("calculator"))]
    return options


FORCED = _forced_calls()


def _run(parser: StreamParser, pieces: Sequence[str]) -> tuple[str, str, list, str]:
    """Shown text, final content, calls and streamed argument text of `pieces` fed one by one."""
    shown, arguments = [], []
    for piece in pieces:
        shown.append(parser.feed(piece))
        arguments += [fragment.arguments for fragment in parser.take_fragments()]
    tail, parsed = parser.finish()
    arguments += [fragment.arguments for fragment in parser.take_fragments()]
    calls = [(call.name, call.arguments) for call in parsed.tool_calls]
    return "".join(shown) + tail, parsed.content, calls, "".join(arguments)


def _cut(text: str, cuts: Sequence[int]) -> list[str]:
    bounds = sorted({0, len(text), *[cut % (len(text) + 1) for cut in cuts]})
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _chunks(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# ----- adversarial text ------------------------------------------------------------------------------------------

_deep = st.builds(lambda opener, depth, closed: opener * depth + ("]" * depth if closed and opener == "[" else ""),
                  st.sampled_from(["[", "{", '{"a":', '[{"a": ', '{"a": "]}", "b": [']),
                  st.integers(min_value=MAX_DEPTH + 1, max_value=20_000), st.booleans())
_huge_number = st.builds(lambda sign, digits, tail: sign + "1" * digits + tail, st.sampled_from(["", "-"]),
                         st.integers(min_value=4_301, max_value=6_000), st.sampled_from(["", ".5", "e3"]))
_bomb = st.one_of(_deep, _huge_number, st.integers(min_value=1_000, max_value=50_000).map(lambda n: "-" * n + "1"))


def _in_call_shapes(payload: str) -> list[str]:
    """`payload` where each dialect reads JSON or call arguments."""
    return [
        f"<tool_call>{payload}</tool_call>",
        f'<tool_call>{{"name": "get_weather", "arguments": {payload}}}</tool_call>',
        f'<tool_call>{{"name": "get_weather", "arguments": {json.dumps(payload)}}}</tool_call>',  # double-encoded
        f'<|python_tag|>{{"name": "get_weather", "parameters": {payload}}}',
        f'{{"name": "get_weather", "parameters": {{}}}}; {payload}',
        f"get_weather\n{payload}",
        f"simple_browser\nsearch({payload})",
        f"simple_browser\nmclick([{payload}])",
        f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": {payload}}}}}\n</tool_call>',  # forced shape
        f'get_weather\n{{"city": {payload}}}',
    ]


_bombs_in_calls = st.builds(lambda payload, shape: _in_call_shapes(payload)[shape], _bomb,
                            st.integers(min_value=0, max_value=len(_in_call_shapes("")) - 1))

# Pieces of every dialect's markers, whole and cut short, and of JSON: near-misses of real calls.
_near_miss_pieces = st.sampled_from([
    "<tool_call>", "</tool_call>", "<tool_call", "<tool_cal", "</tool_call", "tool_call>", "<tool_", "</", "<",
    "<|python_tag|>", "<|python_tag", "<|python_", "<|observation|>", "<|observation",
    "get_weather\n", "get_weather", "get_weath", "python\n", "simple_browser\n", "search(", "mclick([1])", ")",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}', '{"name": "get_weather", "parameters": {}}',
    '{"city": "Paris"}', '{"name": ', '"arguments": ', "{", "}", "[", "]", '"', "\\", ";", ",", ":", " ", "\n",
    "```python\n", "```", "x", "東京", "🙂", "1" * 50,
])
_near_misses = st.lists(_near_miss_pieces, max_size=40).map("".join)
_adversarial = st.one_of(st.text(max_size=300), _near_misses, _bombs_in_calls,
                         st.builds(lambda a, b, c: a + b + c, _near_misses, _bombs_in_calls, _near_misses))
_cuts = st.lists(st.integers(min_value=0), max_size=12)

_json_soup = st.lists(st.sampled_from(['"', "\\", "[", "]", "{", "}", "1", ",", ":"]), max_size=200).map("".join)

_FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(text=_adversarial, cuts=_cuts, dialect=st.sampled_from(list(DIALECTS)))
def test_no_dialect_parser_raises_and_chunking_does_not_change_the_parse(text, cuts, dialect):
    whole = _run(DIALECTS[dialect].stream_parser(TOOLS), [text])
    assert DIALECTS[dialect].parse(text, TOOLS).content == whole[1]
    in_pieces = _run(DIALECTS[dialect].stream_parser(TOOLS), _cut(text, cuts))
    assert in_pieces[1:3] == whole[1:3]
    assert in_pieces[0].strip() == whole[0].strip() == whole[1]


@_FUZZ
@given(body=_adversarial, cuts=_cuts, forced=st.sampled_from(list(FORCED)))
def test_the_forced_call_parser_never_raises_and_chunking_does_not_change_the_call(body, cuts, forced):
    calls = FORCED[forced]
    for text in (body, calls[0].prefix + body, calls[0].prefix + body + calls[0].suffix):
        whole = _run(ForcedCallParser(calls), [text])
        assert _run(ForcedCallParser(calls), _cut(text, cuts))[2:] == whole[2:]


@_FUZZ
@given(text=st.one_of(st.text(max_size=200), _bomb, _near_misses, _json_soup))
def test_bounded_loading_raises_nothing_but_json_decode_errors(text):
    for load in (loads_bounded, lambda t: loads_sequence(t, ";")):
        try:
            load(text)
        except json.JSONDecodeError:
            pass


# ----- linear time -----------------------------------------------------------------------------------------------

def _repeat(head: str, unit: str, tail: str = "") -> Callable[[int], str]:
    return lambda size: head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


def _hermes() -> StreamParser:
    return hermes.stream_parser(TOOLS)


# Long replies that keep a parser undecided, in the shapes that once made one rescan (or copy) all it holds per chunk.
_HERMES_HELD = _repeat('<tool_call>{"name": "get_weather", "arguments": {"city": "', "</tool_call> <tool_cal ")
LINEAR_CASES = {
    "hermes: closing tags in an open block": (_hermes, _repeat("<tool_call>", "x</tool_call>")),
    "hermes: closing tags inside a string": (_hermes, _HERMES_HELD),
    "hermes: cut-off tags, no call": (_hermes, _repeat("", "<tool_cal<tool_call </tool_call")),
    "hermes: a long valid call": (_hermes, _repeat('<tool_call>{"name": "get_weather", "arguments": {"city": "',
                                                   "x\\\"[{", '"}}</tool_call>')),
    "llama3: leading spaces": (lambda: llama3.stream_parser(TOOLS), _repeat("", " ", "<|python_ta")),
    "llama3: a long held call": (lambda: llama3.stream_parser(TOOLS),
                                 _repeat('<|python_tag|>{"name": "get_weather", "parameters": {"city": "', "x; {\\\"")),
    "glm4: leading spaces": (lambda: glm4.stream_parser(TOOLS), _repeat("", " \n", "get_weath")),
    "glm4: spaces after a name": (lambda: glm4.stream_parser(TOOLS), _repeat("get_weather", " ")),
    "glm4: a long held call": (lambda: glm4.stream_parser(TOOLS), _repeat('get_weather\n{"city": "', "x\\\"{[")),
    "forced: JSON with runs of spaces": (lambda: ForcedCallParser(FORCED["hermes json"]),
                                         _repeat(FORCED["hermes json"][0].prefix + '{"city": "', "x" + " " * 40)),
    "forced: code with newlines and backticks": (lambda: ForcedCallParser(FORCED["hermes code"]),
                                                 _repeat(FORCED["hermes code"][0].prefix, "x = 1\n\n``\n")),
}


def _best_time(make_parser: Callable[[], StreamParser], text: str, runs: int = 3) -> float:
    """The fastest of `runs` feeds of `text` in 4-character chunks, in this thread's CPU time: another process on the
    same core (a second test worker) does not count, and the fastest run is the least disturbed by caches."""
    chunks = _chunks(text)
    best = float("inf")
    for _ in range(runs):
        parser = make_parser()
        started = time.thread_time()
        for chunk in chunks:
            parser.feed(chunk)
            parser.take_fragments()
        parser.finish()
        best = min(best, time.thread_time() - started)
    return best


@pytest.mark.parametrize("case", list(LINEAR_CASES))
def test_parsers_take_linear_time(case):
    make_parser, text_of = LINEAR_CASES[case]
    size = 16_000
    while (small := _best_time(make_parser, text_of(size))) < 0.05 and size < 2_000_000:
        size *= 2  # big enough that the time is measurable above timer and scheduling noise
    large = _best_time(make_parser, text_of(4 * size))
    # Linear gives about 4, quadratic 16.
    assert large / small < 8, f"{case}: {size} chars took {small:.3f} s, {4 * size} took {large:.3f} s"


def test_hermes_near_miss_text_in_small_chunks_is_fast():
    """The probe's case: 13 KB of cut-off and stray tags in 4-character chunks took 11 s."""
    for text in (_repeat("", "<tool_call>{\"a\": \"</tool_call<tool_cal</tool_call>")(13_000),
                 _repeat("<tool_call>", "x</tool_call>")(13_000)):
        parser = hermes.stream_parser(TOOLS)
        started = time.perf_counter()
        shown = [parser.feed(chunk) for chunk in _chunks(text)]
        tail, parsed = parser.finish()
        assert time.perf_counter() - started < 1.0
        assert parsed.tool_calls == [] and "".join(shown) + tail == text


# ----- the probe's findings, one by one --------------------------------------------------------------------------

@pytest.mark.parametrize("payload", [DEEP, BIG_INT, "-" + BIG_INT, '"' + "\\\\" * 10 + '"' + "]" * 5 + DEEP])
@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_json_bombs_in_calls_are_text_in_every_dialect(payload, dialect):
    for text in _in_call_shapes(payload):
        parsed = DIALECTS[dialect].parse(text, TOOLS)
        assert parsed.tool_calls == [] and parsed.content == text.strip()


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_a_5000_digit_integer_is_not_a_call_in_any_dialect(dialect):
    text = {
        "hermes": f'<tool_call>{{"name": "get_weather", "arguments": {{"city": {BIG_INT}}}}}</tool_call>',
        "llama3_json": f'{{"name": "get_weather", "parameters": {{"city": {BIG_INT}}}}}',
        "glm4": f'get_weather\n{{"city": {BIG_INT}}}',
    }[dialect]
    parsed = DIALECTS[dialect].parse(text, TOOLS)
    assert parsed.tool_calls == [] and parsed.content == text


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_the_same_call_with_a_short_integer_still_is_one(dialect):
    text = {
        "hermes": '<tool_call>{"name": "get_weather", "arguments": {"city": 75001}}</tool_call>',
        "llama3_json": '{"name": "get_weather", "parameters": {"city": 75001}}',
        "glm4": 'get_weather\n{"city": 75001}',
    }[dialect]
    assert [(c.name, c.arguments) for c in DIALECTS[dialect].parse(text, TOOLS).tool_calls] == [
        ("get_weather", {"city": 75001})]


@pytest.mark.parametrize("body", [
    "search(" + "-" * 50_000 + "1)",  # MemoryError in Python's parser
    "search(" + "-" * 4_000 + "1)",  # RecursionError in literal_eval
    "search({[1]: 2})",  # TypeError: a list as a dict key
    "mclick(" + "[" * 10_000 + ")",
])
def test_glm4_browser_calls_that_break_pythons_parser_are_text(body):
    text = "simple_browser\n" + body
    parsed = glm4.parse(text, ["web_search", "mclick"])
    assert parsed.tool_calls == [] and parsed.content == text


def test_glm4_browser_calls_still_work():
    parsed = glm4.parse('simple_browser\nsearch("weather in Paris", recency_days=3)', ["web_search"])
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("web_search", {"query": "weather in Paris", "recency_days": 3})]


@pytest.mark.parametrize("arguments", [DEEP, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
                                       '{"a": ' * 5_000 + "1" + "}" * 5_000, f'{{"city": {BIG_INT}}}'])
def test_client_arguments_over_the_limits_are_a_clear_value_error(arguments):
    message = {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                     "function": {"name": "get_weather", "arguments": arguments}}]}
    with pytest.raises(ValueError, match="tool call 'get_weather': arguments are too big to decode") as raised:
        Conversation.from_openai([message])
    assert type(raised.value) is ValueError  # what the API server answers with a 400


def test_arguments_that_are_neither_a_string_nor_an_object_are_a_value_error():
    with pytest.raises(ValueError, match="arguments must be a JSON object"):
        ToolCall.from_openai({"function": {"name": "f", "arguments": [1]}})


def test_a_server_sending_arguments_over_the_limits_gets_a_notice():
    native = NativeCalls([_tool("get_weather")])
    native.add([CallFragment(0, id="call_1", name="get_weather"), CallFragment(0, DEEP)])
    calls, notice = native.decode()
    assert calls == [] and notice is not None and "get_weather (arguments are too big to decode" in notice


@pytest.mark.parametrize("forced", list(FORCED))
def test_forced_calls_with_json_bombs_are_no_calls(forced):
    calls = FORCED[forced]
    for payload in (DEEP, BIG_INT, f'{{"city": {BIG_INT}}}'):
        parser = ForcedCallParser(calls)
        for chunk in _chunks(calls[0].prefix + payload + calls[0].suffix):
            parser.feed(chunk)
        _, parsed = parser.finish()
        assert calls[0].body_argument or parsed.tool_calls == []


def test_past_calls_with_unreadable_arguments_are_rendered_as_empty():
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": DEEP}}]}]
    prompt = hermes.render(messages, [_tool("get_weather")], native=True)
    assert prompt.messages[1]["tool_calls"][0]["function"]["arguments"] == {}


# ----- the bounded loader ----------------------------------------------------------------------------------------

def test_bounded_loading_keeps_ordinary_json_and_refuses_what_is_over_a_limit():
    assert loads_bounded('{"a": [1, "]]]", {"b": null}]}') == {"a": [1, "]]]", {"b": None}]}
    assert loads_bounded("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    assert loads_sequence(' {"a": 1}; [2] ;3', ";") == [{"a": 1}, [2], 3] and loads_sequence("  ") == []
    for text, reason in [("[" * (MAX_DEPTH + 1), "nested deeper"), (BIG_INT, "too many digits"),
                         (" " * (MAX_CHARS + 1), "longer than")]:
        with pytest.raises(JSONLimitError, match=reason):
            loads_bounded(text)
    with pytest.raises(json.JSONDecodeError) as raised:
        loads_bounded("{oops")
    assert type(raised.value) is json.JSONDecodeError  # plain bad JSON keeps its own error


@pytest.mark.parametrize("text, depth", [
    ("", 0), ("1", 0), ("[]", 1), ('[{"a": [1]}]', 3), ('["[[[", "\\"[["]', 1), ('"unclosed [[[', 0),
    ("[" * 100 + "]" * 100, 100), ('{"a": "\\\\"}', 1),
])
def test_nesting_depth_counts_brackets_outside_strings(text, depth):
    assert nesting_depth(text) == depth


def test_checking_a_megabyte_of_brackets_is_quick():
    started = time.perf_counter()
    for text in ("[" * MAX_CHARS, "[]" * (MAX_CHARS // 2), '"' + '\\"' * (MAX_CHARS // 2 - 1) + '"'):
        try:
            loads_bounded(text)
        except json.JSONDecodeError:
            pass
    assert time.perf_counter() - started < 2.0
