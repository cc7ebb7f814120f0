"""Every code example of README.md and of the documentation pages (docs/*.md), run as it is written: the API
examples (curl, the openai SDK) against a real `python -m app.frontends.api` on 127.0.0.1 serving the embedded
SmolLM2 (as `make serve` starts it), the picture example against one serving a tiny vision-language model named as
the documentation's, the custom tool, the JSON configurations through the app's own loaders and a real MCP client,
the commands and the tree through make and the file system.

The blocks are read from the Markdown files by their section and order, never copied here: an example edited in
the documentation is the example tested. An example that several files show (the two commands) is tested in each;
any other example must be in one file only. The one change made to them: the servers listen on free ports, so
`127.0.0.1:8000` in an example becomes that port (8000 may be taken on a test machine); the MCP configuration's
`/path/to/...` placeholder becomes this checkout. Where the documentation shows what an example prints or returns,
its output block is read too, and the real output must have its shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from harness.local_http import free_port
from harness.processes import server_process
from tests.helpers import ARTIFACTS, ROOT

pytestmark = pytest.mark.timeout(900)  # a safety net: the examples' own answers take a minute on 2 busy cores
README = ROOT / "README.md"
# README.md and every documentation page: each of their code blocks is an example with a test.
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("*.md")))
DEFAULT_ADDRESS = "127.0.0.1:8000"  # where the documentation's API examples expect `make serve`
PLACEHOLDER = "/path/to/composite-llm-demo"  # the docs' stand-in for this checkout in MCP client configurations


# ----- the documentation's code blocks --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    document: str  # the file it is in, relative to the checkout: README.md, docs/api.md...
    section: str  # the heading it is under, without the #s
    language: str  # the fence's info string ("" for none)
    text: str
    line: int  # where its fence opens, 1-based


def document_blocks(path: Path) -> list[Block]:
    document = path.relative_to(ROOT).as_posix()
    blocks, section, fence, language, body, start = [], "", None, "", [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if fence is None:
            opened = re.match(r"^(\s*)(`{3,})\s*([\w+-]*)\s*$", line)
            if opened:
                fence, language, body, start = opened.group(2), opened.group(3), [], number
            elif line.startswith("#"):
                section = line.lstrip("#").strip()
        elif line.strip() == fence:
            blocks.append(Block(document, section, language, "\n".join(body) + "\n", start))
            fence = None
        else:
            body.append(line)
    return blocks


def all_blocks() -> list[Block]:
    """Every code block of README.md and docs/*.md, file by file."""
    return [block for path in DOCUMENTS for block in document_blocks(path)]


def blocks_in(section: str) -> list[Block]:
    found = [block for block in all_blocks() if block.section == section]
    assert found, f"README.md and docs/*.md have no code blocks under the heading {section!r} any more"
    return found


def blocks(section: str, language: str) -> list[Block]:
    """Every block of `language` under the heading `section`, in every file that shows one."""
    found = [b for b in blocks_in(section) if b.language == language]
    assert found, f"README.md and docs/*.md have no {language} block under {section!r}"
    return found


def block(section: str, language: str, index: int = 0) -> Block:
    """The `index`-th block of `language` under the heading `section`: an example shown in one file only (a copy in
    a second file would go untested, so it fails here)."""
    found = blocks(section, language)
    documents = sorted({b.document for b in found})
    assert len(documents) == 1, f"the {language} example under {section!r} is in {documents}: keep it in one file"
    assert len(found) > index, f"{documents[0]} has no {language} block number {index + 1} under {section!r}"
    return found[index]


def on_port(text: str, port: int) -> str:
    """The example with the server's free port for 8000 (the only change made to an API example)."""
    assert DEFAULT_ADDRESS in text, f"the example no longer talks to {DEFAULT_ADDRESS}: {text[:200]!r}"
    return text.replace(DEFAULT_ADDRESS, f"127.0.0.1:{port}")


API = "The OpenAI-compatible API"
CUSTOM_TOOL = "Adding your own tool"
MCP_TOOLS = "Tools from MCP servers"
MCP_SERVER = "The app's tools as an MCP server"
RESPONSES = "The Responses API: Codex CLI, the OpenAI Agents SDK"
FILES = "Files and vector stores: your documents through the API"
FILE_SEARCH = "file_search in the Responses API"
EVAL_SETS = "Eval sets: turns that went right (or wrong), kept as tests"
RUNNING_EVALS = "Running a set"
# Each example, by section and language, and the test that runs it: a new example needs a test (and a line here).
EXAMPLES = {
    ("Two commands", "bash"): "test_the_two_commands_are_what_make_runs",
    (CUSTOM_TOOL, "python"): "test_the_custom_tool_example_registers_a_checked_tool",
    (MCP_TOOLS, "json"): "test_the_mcp_json_example_is_accepted_by_the_apps_loader",
    (API, "bash"): "test_the_curl_example_returns_a_forced_calculator_call_promptly",
    (API, "json"): "test_the_curl_example_returns_a_forced_calculator_call_promptly (its output)",
    (API, "python"): "test_the_python_example_streams_parses_and_sees_a_picture",
    (API, "text"): "test_the_python_example_streams_parses_and_sees_a_picture (its output)",
    (RESPONSES, "toml"): "tests/api/test_codex_cli.py (Codex runs with this config.toml)",
    (RESPONSES, "bash"): "tests/api/test_codex_cli.py (its key variable and command)",
    (RESPONSES, "python"): "test_the_agents_sdk_example_calls_its_tool_and_answers",
    (FILES, "python"): "test_the_vector_store_example_finds_the_page_that_answers",
    (FILE_SEARCH, "python"): "test_the_vector_store_example_finds_the_page_that_answers (then its file_search)",
    (MCP_SERVER, "json"): "test_the_mcp_client_configuration_starts_the_apps_mcp_server",
    ("The tree", ""): "test_the_tree_in_the_docs_exists",
    (EVAL_SETS, "yaml"): "test_the_hand_written_eval_set_reads_as_written",
    (RUNNING_EVALS, "bash"): "test_the_make_eval_examples_run_the_evals_as_the_docs_say",
    (RUNNING_EVALS, "yaml"): "test_the_make_eval_examples_run_the_evals_as_the_docs_say (the CI step)",
    ("Traces", "bash"): "tests/api/test_api_traces.py (a server started with these OTEL_* variables exports to a "
                        "local OTLP receiver; the app configures tracing through the same function)",
}


def test_every_code_block_of_the_docs_has_its_test():
    assert {path.name for path in DOCUMENTS} >= {"README.md", "index.md", "api.md", "tools-and-mcp.md"}
    untested = [f"{b.document} line {b.line}: {b.language or 'plain'} block under {b.section!r}"
                for b in all_blocks() if (b.section, b.language) not in EXAMPLES]
    assert not untested, ("examples of README.md and docs/*.md without a test in tests/api/test_readme_examples.py:\n"
                          + "\n".join(untested))


# ----- servers: the embedded model as `make serve` runs it, and a vision-language model ----------------------------

def api_server(tmp_path_factory: pytest.TempPathFactory, name: str, *args: str):
    """`python -m app.frontends.api` on a free port of 127.0.0.1 (the command `make serve` runs), in a process group
    that `timeout` ends even if pytest is killed; yields the port."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for setting in ("DEMO_MODEL", "DEMO_BACKEND", "DEMO_SERVER_API_KEY", "DEMO_API_KEY"):
        env.pop(setting, None)
    command = [sys.executable, "-m", "app.frontends.api", "--host", "127.0.0.1", "--port", str(port), *args]
    ARTIFACTS.mkdir(exist_ok=True)
    return port, server_process(command, f"http://127.0.0.1:{port}/health", cwd=tmp_path_factory.mktemp(name),
                                env=env, log=ARTIFACTS / f"readme-{name}.log", start_timeout_s=300,
                                lifetime_s=1800)


@pytest.fixture(scope="module")
def smol_port(smollm2_dir, tmp_path_factory):
    """The docs' `make serve`: the embedded SmolLM2 (converted by the smollm2_dir fixture before it starts)."""
    port, server = api_server(tmp_path_factory, "serve")
    with server:
        yield port


@pytest.fixture(scope="module")
def vision_port(tmp_path_factory):
    """The docs' `MODEL=~/models/SmolVLM-256M-Instruct make serve`, on a tiny randomly initialised model of
    SmolVLM's architecture in a folder of that name (no model is downloaded in tests)."""
    from tests.tiny_vlm import build_tiny_vlm

    folder = build_tiny_vlm(tmp_path_factory.mktemp("models") / "SmolVLM-256M-Instruct")
    port, server = api_server(tmp_path_factory, "serve-vision", "--model", str(folder))
    with server:
        yield port


def run_python(code: str, namespace: dict[str, Any], where: str) -> str:
    """Run an example's code in `namespace` (`where`: the file it comes from); what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(ROOT / where), "exec"), namespace)  # the documentation's own example
    return printed.getvalue()


# ----- Two commands ------------------------------------------------------------------------------------------------

def test_the_two_commands_are_what_make_runs():
    """`make run` and `make test` for real are the newcomer test's (a clone, set up from nothing): here, that each
    command of the block is a make target doing what its comment says (`make -n` prints without running)."""
    shown = blocks("Two commands", "bash")
    assert {b.document for b in shown} >= {"README.md", "docs/getting-started.md"}
    for example in shown:  # the same two commands wherever they are shown
        commands = [line.split("#")[0].split() for line in example.text.splitlines()]
        assert [c for c in commands if c] == [["make", "run"], ["make", "test"]], example.document
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT", "MAKEFLAGS", "MAKELEVEL")}

    def dry_run(target: str) -> str:
        result = subprocess.run(["make", "-n", target], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout

    serve = "streamlit run app/frontends/streamlit/web.py --server.address 127.0.0.1 --server.port 8501"
    assert serve in dry_run("run")
    plan = dry_run("test")
    assert "ruff check" in plan and "mypy" in plan and "-m pytest -q tests" in plan


# ----- Evals ------------------------------------------------------------------------------------------------------

def test_the_hand_written_eval_set_reads_as_written():
    from app.evals.files import parse_set, set_to_yaml

    (example,) = blocks(EVAL_SETS, "yaml")
    eval_set = parse_set(example.text.encode(), example.document)
    (case,) = eval_set.cases
    assert (eval_set.name, case.page, case.tools) == ("Calculator", "tools", ["calculator"])
    assert [check.type for check in case.checks] == ["tool_call", "contains", "max_latency"]
    assert parse_set(set_to_yaml(eval_set).encode()) == eval_set  # exported as the Evals page does, the same set


def test_the_make_eval_examples_run_the_evals_as_the_docs_say():
    """Each `make eval` line of the docs (and the CI step's) is the headless run it says (`make -n` prints without
    running; tests/engines/test_evals_run.py runs `python -m app.evals` itself)."""
    import yaml

    (commands,) = blocks(RUNNING_EVALS, "bash")
    (workflow,) = blocks(RUNNING_EVALS, "yaml")
    lines = [line.split("#")[0].split() for line in commands.text.splitlines()]
    lines.append(yaml.safe_load(workflow.text)[0]["run"].split())
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "TARGETS", "SET")}
    for words in lines:
        assert words[:2] == ["make", "eval"], words
        settings = dict(word.split("=", 1) for word in words[2:])
        done = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        (run,) = [line for line in done.stdout.replace("\\\n", " ").splitlines() if "-m app.evals" in line]
        assert f"--set {settings['SET']}" in run and f"--targets {settings['TARGETS']}" in run
        assert f"--out {settings.get('EVAL_REPORT', 'eval-report.json')}" in run
        assert ("REPEATS" not in settings) or f"--repeats {settings['REPEATS']}" in run
        assert ("BASELINE" not in settings) or f"--baseline {settings['BASELINE']}" in run


# ----- Adding your own tool ----------------------------------------------------------------------------------------

def test_the_custom_tool_example_registers_a_checked_tool():
    """The function added to app/tools/custom.py (run in a copy of that module's namespace, taken into a registry
    of its own so that the tools of other tests stay as they are, as load_tools() takes in that module's marked
    functions) becomes a tool with the JSON Schema its docstring and hints say and the default 10 s limit; its
    arguments are checked against that schema, and it runs."""
    import app.tools.custom as custom
    from app.tools import tool_registry as registry_module

    example = block(CUSTOM_TOOL, "python")
    namespace = dict(vars(custom))
    run_python(example.text, namespace, example.document)
    registry = registry_module.ToolRegistry()
    for function in registry_module.marked_tools(namespace):
        registry.add_marked(function)
    assert registry.names == ["count_words", "shout"]
    tool = registry.get("shout")
    assert tool is not None and tool.timeout_s == 10 and registry.schemas()[-1] == tool.schema
    assert tool.schema["function"]["name"] == "shout" and tool.description == "Repeat a text in capitals."
    assert tool.parameters["properties"] == {"text": {"type": "string", "description": "What to shout."},
                                             "times": {"type": "integer", "description": "How many times."}}
    assert tool.parameters["required"] == ["text"]
    assert registry.validation_error("shout", {"text": "hello", "times": "twice"}) is not None
    refused = registry.call("shout", {"times": 2})
    assert not refused.ok and "text" in refused.content
    result = registry.call("shout", {"text": "hello", "times": 3})
    assert result.ok and result.content == "HELLO HELLO HELLO"


# ----- Tools from MCP servers --------------------------------------------------------------------------------------

def test_the_mcp_json_example_is_accepted_by_the_apps_loader(tmp_path, monkeypatch):
    """The administrator's mcp.json, in the folder the app runs from, is found and read by the app's own strict
    loader: a stdio server and a Streamable HTTP one whose ${DOCS_MCP_TOKEN} comes from the environment. (Starting
    `uvx mcp-server-time` and reaching mcp.example.com are the servers' business; the loader decides the rest.)"""
    from app.config import McpSettings
    from app.mcp_client.server_config import HttpServer, StdioServer, load_config, policy_defaults

    (tmp_path / "mcp.json").write_text(block(MCP_TOOLS, "json").text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEMO_MCP_CONFIG", raising=False)
    monkeypatch.setenv("DOCS_MCP_TOKEN", "token-from-the-environment")
    path = McpSettings.from_env().config_path
    assert Path(path) == tmp_path / "mcp.json"
    servers = load_config(path)
    assert servers == {
        "time": StdioServer(command="uvx", args=["mcp-server-time", "--local-timezone=Europe/Paris"]),
        "docs": HttpServer(url="https://mcp.example.com/mcp",
                           headers={"Authorization": "Bearer token-from-the-environment"},
                           policy="ask", tools={"search": "auto", "delete_page": "never"}),
    }
    # The run policies as the pages apply them: per tool, else the server's, else the tool's annotations.
    from app.tools.policy import RunPolicy, policy_for
    from app.tools.tool_registry import Tool, ToolHints, function_schema

    def docs_tool(name: str) -> Tool:  # each says it only reads, in a closed world: on its own it would run
        return Tool(name, lambda **_: "", function_schema(name, "", {"type": "object", "properties": {}}),
                    origin="MCP server docs", hints=ToolHints.reader(name, open_world=False))

    defaults = policy_defaults(servers)
    expected: dict[str, RunPolicy] = {"search": "auto", "delete_page": "never", "summarise": "ask"}
    for name, policy in expected.items():
        assert policy_for(docs_tool(name), {}, defaults) == policy


# ----- The OpenAI-compatible API -----------------------------------------------------------------------------------

def same_shape(real: Any, shown: Any, where: str = "") -> None:
    """`real` has the keys (recursively) and value types of `shown`, the documentation's rendering of that output."""
    assert type(real) is type(shown), f"{where or 'the output'}: {type(real).__name__}, the docs show " \
                                      f"{type(shown).__name__}"
    if isinstance(shown, dict):
        assert set(real) == set(shown), f"{where}: keys {sorted(real)}, the docs show {sorted(shown)}"
        for key in shown:
            same_shape(real[key], shown[key], f"{where}.{key}")
    elif isinstance(shown, list):
        assert len(real) == len(shown), f"{where}: {len(real)} items, the docs show {len(shown)}"
        for index, (item, shown_item) in enumerate(zip(real, shown, strict=True)):
            same_shape(item, shown_item, f"{where}[{index}]")


def test_the_curl_example_returns_a_forced_calculator_call_promptly(smol_port):
    """The first API example of docs/api.md: a forced calculator call for "What is 17 * 23?". It used to run to the
    1,024-token default (minutes on a CPU) with a string that never closed; now it is the call the the docs show."""
    from app.tools.calculator import evaluate

    command = on_port(block(API, "bash").text, smol_port)
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    real, shown = json.loads(result.stdout), json.loads(block(API, "json").text)
    same_shape(real, shown)
    choice, shown_choice = real["choices"][0], shown["choices"][0]
    assert choice["finish_reason"] == shown_choice["finish_reason"] == "tool_calls"
    call, shown_call = choice["message"]["tool_calls"][0]["function"], shown_choice["message"]["tool_calls"][0][
        "function"]
    assert call["name"] == shown_call["name"] == "calculator"
    arguments, shown_arguments = json.loads(call["arguments"]), json.loads(shown_call["arguments"])
    parameters = json.loads(re.search(r"-d '(.*)'", command, re.S).group(1))["tools"][0]["function"]["parameters"]
    jsonschema.validate(arguments, parameters)
    assert set(arguments) == set(shown_arguments)
    assert evaluate(arguments["expression"]) == evaluate(shown_arguments["expression"]) == 391
    assert real["usage"]["completion_tokens"] < 100  # promptly: the docs' call is 35 tokens


def test_the_python_example_streams_parses_and_sees_a_picture(smol_port, vision_port, tmp_path, monkeypatch):
    """The SDK example: a streamed answer and a parsed City from the embedded model, as the docs' output block
    shows them; then its picture part (from its comment on), with the same `client = ...` line, against a server
    started on a vision-language model, with a photo.jpg in the folder it runs in."""
    from PIL import Image

    example = block(API, "python")
    code = example.text
    text_part, picture_part = code.split("# A picture", 1)
    picture_part = "# A picture" + picture_part
    opening = code[: code.index("\n", code.index("client = OpenAI(")) + 1]  # the import and the client

    namespace: dict[str, Any] = {"__name__": "readme_example"}
    printed = run_python(on_port(text_part, smol_port), namespace, example.document)
    shown = block(API, "text").text.strip().splitlines()
    lines = printed.strip().splitlines()
    # The streamed answer (sampled prose: only that there is one, of some words), then the City on a line of its own.
    assert len(printed.split()) >= 10 and len(lines) >= 2
    city = namespace["reply"].choices[0].message.parsed
    assert isinstance(city, namespace["City"]) and lines[-1] == str(city)
    field = r"name='[^']*' country='[^']*' population=-?\d+"
    assert re.fullmatch(field, lines[-1]) and re.fullmatch(field, shown[-1]), (lines[-1], shown[-1])

    Image.new("RGB", (64, 48), (200, 120, 40)).save(tmp_path / "photo.jpg", "JPEG")
    monkeypatch.chdir(tmp_path)
    picture: dict[str, Any] = {"__name__": "readme_example"}
    run_python(on_port(opening, vision_port) + picture_part, picture, example.document)
    reply = picture["reply"]
    assert reply.model == "SmolVLM-256M-Instruct" and reply.choices[0].message.role == "assistant"
    assert reply.usage.prompt_tokens > 4  # the picture's tokens were read
    assert reply.choices[0].finish_reason in ("stop", "length")


# ----- The Responses API -------------------------------------------------------------------------------------------

def test_the_agents_sdk_example_calls_its_tool_and_answers(smol_port):
    """The Agents SDK example on its default Responses API: the agent called get_weather, got its result, and
    printed an answer in words."""
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    example = block(RESPONSES, "python")
    printed = run_python(on_port(example.text, smol_port), namespace, example.document)
    result = namespace["result"]
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"] and kinds[-1] == "message_output_item"
    assert "Sunny and 24 degrees C in" in result.new_items[1].output
    assert printed.strip() == str(result.final_output).strip() and printed.strip()


# ----- Files and vector stores --------------------------------------------------------------------------------------

def test_the_vector_store_example_finds_the_page_that_answers(smol_port, tmp_path, monkeypatch):
    """The example uploads parish-records.pdf from the folder it runs in (the tests' 300-page PDF, the lighthouse
    keeper's pay on page 212), makes a vector store of it and prints what the search finds: page 212 first."""
    from tests.knowledge_fixtures import long_pdf_bytes

    (tmp_path / "parish-records.pdf").write_bytes(long_pdf_bytes())
    monkeypatch.chdir(tmp_path)
    example = block(FILES, "python")
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    printed = run_python(on_port(example.text, smol_port), namespace, example.document).splitlines()
    assert printed[0].startswith("parish-records.pdf page 212 1.0 "), printed[:2]
    assert namespace["store"].file_counts.completed == 1

    # The file_search example goes on from there: SmolLM2 answers with page 212 quoted to it.
    follow = block(FILE_SEARCH, "python")
    answer = run_python(follow.text, namespace, follow.document)
    response = namespace["response"]
    searched = response.output[0]
    assert searched.type == "file_search_call" and searched.results[0].attributes == {"location": "page 212"}
    assert response.output[1].type == "message" and answer.strip() == response.output_text.strip()


# ----- The app's tools as an MCP server ----------------------------------------------------------------------------

def test_the_mcp_client_configuration_starts_the_apps_mcp_server(tmp_path_factory):
    """Claude Desktop's configuration, as the app's own loader reads the same shape, starts our MCP server over
    stdio from anywhere (a client's working folder is its own, not this checkout) and its tools answer."""
    import mcp.types as types
    from mcp import Client, StdioServerParameters, stdio_client

    from app.mcp_client.server_config import StdioServer, parse_config

    [(name, spec)] = parse_config(json.loads(block(MCP_SERVER, "json").text)).items()
    assert name == "composite-demo" and isinstance(spec, StdioServer) and spec.command.startswith(PLACEHOLDER)
    command = spec.command.replace(PLACEHOLDER, str(ROOT))  # the documentation's stand-in for this checkout
    sessions = tmp_path_factory.mktemp("mcp")  # short: a kernel's Unix sockets are named by paths inside it
    client_folder = tmp_path_factory.mktemp("client")

    async def scenario() -> str:
        parameters = StdioServerParameters(command=command, args=spec.args, cwd=client_folder,
                                           env={"DEMO_SESSIONS_DIR": str(sessions)})
        with (client_folder / "server.log").open("w") as errlog:
            async with Client(stdio_client(parameters, errlog=errlog)) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert {"calculator", "convert_units", "web_search", "open_url"} <= names
                result = await client.call_tool("calculator", {"expression": "17 * 23"})
                return "".join(b.text for b in result.content if isinstance(b, types.TextContent))

    assert asyncio.run(scenario()) == "17 * 23 = 391"


# ----- Development -------------------------------------------------------------------------------------------------

def test_the_tree_in_the_docs_exists():
    """Every folder and file the tree of docs/architecture.md names in its first column is there (a name indented by
    two is inside the folder above it; "app/main.py, web.py" are both in app/). Descriptions go on in lines
    indented further."""
    parent, missing = "", []
    for line in block("The tree", "").text.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent > 2:
            continue
        first, *more = [name.strip() for name in re.split(r"\s{2,}", line.strip())[0].split(",")]
        path = parent + first if indent else first
        if not indent and first.endswith("/"):
            parent = first
        folder = Path(path).parent
        missing += [str(p) for p in [Path(path), *(folder / name for name in more)] if not (ROOT / p).exists()]
    assert not missing, f"the tree in docs/architecture.md names what is not there: {missing}"
