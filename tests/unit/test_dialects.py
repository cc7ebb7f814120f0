"""Tool-call dialects on real-looking model outputs, nasty ones included, and their streaming parsers."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.prompting.dialects import DIALECTS, Detection, Dialect, detect_dialect, dialect_detection, get_dialect
from app.prompting.dialects.hermes import HermesDialect

TOOLS = ["get_weather", "calculator", "current_time"]
hermes, glm4, llama3 = DIALECTS["hermes"], DIALECTS["glm4"], DIALECTS["llama3_json"]


def calls(parsed):
    return [(c.name, c.arguments) for c in parsed.tool_calls]


# ----- Hermes / Qwen -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, content, expected",
    [
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "",
         [("get_weather", {"city": "Paris"})]),
        ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
         "Let me check.", [("get_weather", {"city": "Paris"})]),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n<tool_call>\n'
         '{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>', "",
         [("get_weather", {"city": "Paris"}), ("calculator", {"expression": "2+2"})]),
        # arguments double-encoded as a string, as some fine-tunes do
        ('<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Köln\\"}"}</tool_call>', "",
         [("get_weather", {"city": "Köln"})]),
        # closing tag eaten by a stop string: a complete JSON body still counts
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "1/3"}}\n', "",
         [("calculator", {"expression": "1/3"})]),
        # unknown tools are calls too (the registry answers with an error observation)
        ('<tool_call>{"name": "launch_rocket", "arguments": {}}</tool_call>', "", [("launch_rocket", {})]),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "東京 🙂"}}</tool_call>', "",
         [("get_weather", {"city": "東京 🙂"})]),
    ],
)
def test_hermes_calls(text, content, expected):
    parsed = hermes.parse(text, TOOLS)
    assert (parsed.content, calls(parsed)) == (content, expected)


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is sunny.",
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',  # a JSON code block is an answer
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',  # cut mid-call (max tokens)
        "<tool_call>not json at all</tool_call>",
        '<tool_call>{"arguments": {"city": "Paris"}}</tool_call>',  # no name
        '<tool_call>["get_weather", {"city": "Paris"}]</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": [1, 2]}</tool_call>',
        "I use <tool_call> tags to call tools.",
        "<tool_call",
        "",
    ],
)
def test_hermes_text_that_is_not_a_call_stays_text(text):
    parsed = hermes.parse(text, TOOLS)
    assert parsed.tool_calls == [] and parsed.content == text.strip()


def test_hermes_keeps_text_around_a_valid_call_and_an_invalid_block():
    text = ('A <tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call> '
            'B <tool_call>oops</tool_call>')
    parsed = hermes.parse(text, TOOLS)
    assert calls(parsed) == [("calculator", {"expression": "1"})]
    assert parsed.content == "A  B <tool_call>oops</tool_call>"


def test_hermes_closing_tag_inside_an_argument_and_an_invalid_block_before_a_call():
    tricky = '<tool_call>{"name": "calculator", "arguments": {"expression": "</tool_call> in a string"}}</tool_call>'
    assert calls(hermes.parse(tricky, TOOLS)) == [("calculator", {"expression": "</tool_call> in a string"})]
    text = ('X <tool_call>oops</tool_call> '
            'Y <tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>')
    parsed = hermes.parse(text, TOOLS)
    assert calls(parsed) == [("calculator", {"expression": "1"})]
    assert parsed.content == "X <tool_call>oops</tool_call> Y"


def test_hermes_closing_tag_inside_an_argument_then_another_call_in_one_piece_or_in_chunks():
    # The first </tool_call> sits inside a string; a later <tool_call> must not turn the valid call before it into
    # text (it once did when the reply came in one piece, but not when it came in chunks).
    text = ('<tool_call>{"name": "calculator", "arguments": {"expression": "</tool_call>"}}</tool_call> then '
            '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>')
    expected = [("calculator", {"expression": "</tool_call>"}), ("get_weather", {})]
    parsed = hermes.parse(text, TOOLS)
    assert calls(parsed) == expected and parsed.content == "then"
    parser = hermes.stream_parser(TOOLS)
    shown = "".join(parser.feed(text[i : i + 3]) for i in range(0, len(text), 3))
    tail, streamed = parser.finish()
    assert calls(streamed) == expected and (shown + tail).strip() == "then"


def test_hermes_huge_arguments():
    big = "x" * 200_000
    parsed = hermes.parse(json.dumps({"name": "calculator", "arguments": {"expression": big}}).join(
        ["<tool_call>", "</tool_call>"]), TOOLS)
    assert parsed.tool_calls[0].arguments["expression"] == big


def test_hermes_stream_never_shows_call_text():
    parser = hermes.stream_parser(TOOLS)
    text = 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    shown = [parser.feed(ch) for ch in text]
    tail, parsed = parser.finish()
    visible = "".join(shown) + tail
    assert visible == "Checking." and "<" not in "".join(shown)
    assert calls(parsed) == [("get_weather", {"city": "Paris"})]


# ----- GLM-4 ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, expected",
    [
        ('get_weather\n{"city": "Paris"}', [("get_weather", {"city": "Paris"})]),
        ('\nget_weather\n{"city": "Paris"}\n', [("get_weather", {"city": "Paris"})]),
        ('calculator\n{"expression": "6*7"}', [("calculator", {"expression": "6*7"})]),
    ],
)
def test_glm4_calls(text, expected):
    parsed = glm4.parse(text, TOOLS)
    assert calls(parsed) == expected and parsed.content == ""


@pytest.mark.parametrize(
    "text",
    [
        "\nThe weather in Paris is sunny.",
        "get_weather is the tool I would use.\nBut I know the answer: sunny.",  # prose that starts with a name
        'unknown_tool\n{"city": "Paris"}',  # first line must be a known tool
        "get_weather\nnot json",
        'get_weather\n["Paris"]',
        '```json\n{"city": "Paris"}\n```',
        "get",
    ],
)
def test_glm4_text_that_is_not_a_call_stays_text(text):
    parsed = glm4.parse(text, TOOLS)
    assert parsed.tool_calls == [] and parsed.content == text.strip()


def test_glm4_streams_prose_without_waiting_for_the_end():
    parser = glm4.stream_parser(TOOLS)
    assert parser.feed("\nThe") == "\nThe"  # "The" cannot start a tool name: shown at once


def test_glm4_spaces_after_the_name_do_not_depend_on_chunking():
    text = 'get_weather  \n{"city": "Paris"}'
    for cut in range(len(text) + 1):
        parser = glm4.stream_parser(TOOLS)
        shown = parser.feed(text[:cut]) + parser.feed(text[cut:])
        tail, parsed = parser.finish()
        assert calls(parsed) == [("get_weather", {"city": "Paris"})] and shown + tail == "", cut


def test_glm4_renders_calls_and_results_its_way():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    prompt = glm4.render(messages, tools, native=True)
    roles = [m["role"] for m in prompt.messages]
    assert roles == ["system", "user", "assistant", "observation"]
    assert prompt.messages[0]["tools"] == tools
    assert prompt.messages[2]["metadata"] == "get_weather"
    assert json.loads(prompt.messages[2]["content"]) == {"city": "Paris"}


# ----- Llama 3.1 JSON ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}', [("get_weather", {"city": "Paris"})]),
        ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
         [("get_weather", {"city": "Paris"})]),
        ('{"name": "get_weather", "arguments": {"city": "Paris"}}', [("get_weather", {"city": "Paris"})]),
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "calculator", "parameters": '
         '{"expression": "2"}}', [("get_weather", {"city": "Paris"}), ("calculator", {"expression": "2"})]),
    ],
)
def test_llama3_calls(text, expected):
    parsed = llama3.parse(text, TOOLS)
    assert calls(parsed) == expected and parsed.content == ""


@pytest.mark.parametrize(
    "text",
    [
        'Here is the call: {"name": "get_weather", "parameters": {"city": "Paris"}}',
        '```json\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n```',
        '{"name": "unknown", "parameters": {}}',
        '{"name": "get_weather", "parameters": {"city": "Paris"}, "extra": 1}',
        '{"temperature": 21, "unit": "C"}',  # a JSON answer, not a call
        '{"name": "get_weather", "parameters": {"city": "Par',
        '{"name": "get_weather", "parameters": {"city": "Paris"}} and some words',
    ],
)
def test_llama3_text_that_is_not_a_call_stays_text(text):
    parsed = llama3.parse(text, TOOLS)
    assert parsed.tool_calls == [] and parsed.content == text.strip()


def test_llama3_splits_parallel_calls_for_its_template():
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "1"}}}
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call, call]}]
    prompt = llama3.render(messages, [], native=True)
    assert [len(m.get("tool_calls", [])) for m in prompt.messages] == [0, 1, 1]


# ----- shared --------------------------------------------------------------------------------------------------

CHATML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] }}{% endfor %}"


def test_hermes_is_detected_by_its_marker_not_by_falling_back():
    assert dialect_detection(CHATML + "{% if tools %}<tool_call>{% endif %}") == Detection(hermes, by_marker=True)


@pytest.mark.parametrize("template", [None, "", CHATML, "<|start_header_id|>user<|end_header_id|>"])
def test_a_template_without_any_marker_falls_back_to_hermes(template):
    assert dialect_detection(template) == Detection(hermes, by_marker=False)
    assert detect_dialect(template) is hermes


@pytest.mark.parametrize(
    "template, expected",
    [
        ("[gMASK]<sop>{% ... %}<|observation|>", "glm4"),
        ("[gMASK]<sop><tool_call>{{ name }}<arg_key>...<|observation|>", "glm4"),  # GLM-4.5 writes <tool_call> too
        ("<|start_header_id|>ipython ... <|python_tag|>", "llama3_json"),
        ('<|start_header_id|>... {"name": function name, "parameters": ...}', "llama3_json"),
    ],
)
def test_detection_of_the_other_families(template, expected):
    assert dialect_detection(template) == Detection(DIALECTS[expected], by_marker=True)


def test_dialects_are_listed_in_their_order_and_unknown_names_are_refused():
    assert list(DIALECTS) == ["hermes", "glm4", "llama3_json"]
    assert get_dialect("glm4") is glm4
    with pytest.raises(ValueError, match="unknown tool-call dialect"):
        get_dialect("nope")


@pytest.fixture
def restore_registry():
    """Takes out any dialect a test registers, so the other tests see only the real ones."""
    before = set(DIALECTS)
    yield
    for name in set(DIALECTS) - before:
        DIALECTS.remove(name)


def test_each_entry_is_its_dialects_own_name_and_the_classes_load_when_first_read():
    import subprocess
    import sys

    assert all(DIALECTS[name].name == name for name in DIALECTS)
    probe = ("import sys; from app.prompting.dialects import DIALECTS; "
             "before = 'app.prompting.dialects.glm4' in sys.modules; DIALECTS['glm4']; "
             "print(before, 'app.prompting.dialects.glm4' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["False", "True"]


def test_a_new_dialect_takes_one_line_and_is_detected_by_its_marker(restore_registry):
    class ToyDialect(Dialect):
        name = "toy"
        label = "Toy (<toy_call> tags)"

        @classmethod
        def detects(cls, chat_template: str) -> bool:
            return "<toy_call>" in chat_template

        def stream_parser(self, tool_names):
            return hermes.stream_parser(tool_names)

        def json_call(self, tool):
            return hermes.json_call(tool)

        def format_instructions(self) -> str:
            return "Write <toy_call>."

    assert "toy" not in DIALECTS  # defining it registers nothing: its line in DIALECTS does
    DIALECTS.add("toy", ToyDialect)
    assert list(DIALECTS) == ["hermes", "glm4", "llama3_json", "toy"]  # after the built-in ones
    assert isinstance(get_dialect("toy"), ToyDialect)
    assert dialect_detection(CHATML + "<toy_call>") == Detection(DIALECTS["toy"], by_marker=True)
    assert dialect_detection(CHATML) == Detection(hermes, by_marker=False)


def test_a_taken_name_is_refused(restore_registry):
    class AnotherHermes(HermesDialect):
        name = "hermes"

    assert list(DIALECTS) == ["hermes", "glm4", "llama3_json"]
    with pytest.raises(ValueError, match="'hermes' is defined twice"):
        DIALECTS.add("hermes", AnotherHermes)
    assert type(DIALECTS["hermes"]) is HermesDialect


def test_fallback_rendering_lists_tools_and_leaves_past_calls_out():
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                               "parameters": {"type": "object"}}}]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"},
    ]
    prompt = hermes.render(messages, tools, native=False)
    assert prompt.tools is None
    system = prompt.messages[0]["content"]
    assert system.startswith("Be brief.") and '"name": "get_weather"' in system
    assert "<tool_call>" in prompt.messages[0]["content"]
    # the call itself is left out (untrained models copy it instead of answering); its result stays
    assert [m["role"] for m in prompt.messages] == ["system", "user", "tool"]
    assert prompt.messages[2] == {"role": "tool", "content": "sunny"}
    as_user = hermes.render(messages, tools, native=False, tool_role=False)
    assert as_user.messages[2] == {"role": "user", "content": "Result of get_weather: sunny"}


# ----- properties ----------------------------------------------------------------------------------------------

_pieces = st.sampled_from([
    "<tool_call>", "</tool_call>", "<tool_", "call>", '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '{"name": "calculator", "parameters": {"expression": "1"}}', "get_weather\n", "calculator", "\n", "{", "}",
    '"', "<|python_tag|>", ";", " ", "text ", "東京", "🙂", '{"city": "Paris"}',
])
_texts = st.one_of(st.text(max_size=200), st.lists(_pieces, max_size=12).map("".join))


@settings(max_examples=300, deadline=None)
@given(text=_texts, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
       dialect=st.sampled_from(list(DIALECTS)))
def test_no_parser_raises_and_streaming_equals_the_final_parse(text, cuts, dialect):
    d = DIALECTS[dialect]
    final = d.parse(text, TOOLS)
    parser = d.stream_parser(TOOLS)
    bounds = sorted({0, len(text), *[c for c in cuts if c <= len(text)]})
    shown = "".join(parser.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
    tail, streamed = parser.finish()
    assert (shown + tail).strip() == final.content == streamed.content
    assert calls(streamed) == calls(final)
