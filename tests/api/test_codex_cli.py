"""OpenAI's Codex CLI (pinned, harness/codex_cli.py) against our server's POST /v1/responses: `codex exec` with our
server as its model provider, on 127.0.0.1, in a throwaway CODEX_HOME, with no login and no other network.

Codex sends a ~40 KB request (its instructions as developer messages, eight function tools, a `namespace` of five
sub-agent tools and, unless configured off, a hosted `web_search` tool), about 30,000 tokens for our tiny models'
tokenizer: the models here get a 65,536-token context. An ASGI wrapper around the app records every request and
what the server streamed back, so the tests assert on both ends: what Codex printed or did, and what it sent.

Needs npm and the npm registry the first time (Codex is installed into ~/.cache/composite-demo); without them the
tests skip, except under REQUIRE_NO_SKIPS=1 (CI), where they fail."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings, ServerSettings
from app.frontends.api.server_app import create_app
from harness.codex_cli import CODEX_VERSION, CodexUnavailable, codex_binary
from harness.local_http import serving
from harness.processes import stop
from tests.tiny_model import build_scripted_model

MODEL = "codex-tiny"  # the served name, which Codex asks for with -m
KEY = "codex-test-key"  # the server's API key, which Codex sends from $DEMO_KEY
CONTEXT = 65536  # Codex's first request is ~30,000 tokens for the tiny tokenizer (ours: 4096 by default)
MARK = "codex-ran-this"
CALL = {"name": "exec_command", "arguments": {"cmd": f"echo {MARK}"}}  # Codex's shell tool and its argument
CODEX_TIMEOUT_S = 120

pytestmark = pytest.mark.model  # real (tiny) models, built through a helper conftest.py does not look into


@pytest.fixture(scope="module")
def codex() -> Path:
    try:
        return codex_binary()
    except CodexUnavailable as error:
        if os.environ.get("REQUIRE_NO_SKIPS") == "1":
            pytest.fail(f"REQUIRE_NO_SKIPS=1, but Codex CLI {CODEX_VERSION} cannot be installed: {error}")
        pytest.skip(f"Codex CLI {CODEX_VERSION} cannot be installed: {error}")


# ----- both ends recorded: what reaches the API, and anything that tries to leave 127.0.0.1 ----------------------

@dataclass
class Exchange:
    """One POST /v1/responses: the request as sent and the server's answer as streamed."""

    headers: dict[str, str]
    body: bytearray = field(default_factory=bytearray)
    status: int | None = None
    answer: bytearray = field(default_factory=bytearray)

    def request(self) -> dict[str, Any]:
        return json.loads(self.body)

    def events(self) -> list[dict[str, Any]]:
        """The Server-Sent Events' data, as JSON."""
        text = self.answer.decode().replace("\r\n", "\n")
        return [json.loads(line[len("data:"):]) for block in text.split("\n\n") for line in block.split("\n")
                if line.startswith("data:")]


class Recorder:
    """ASGI middleware around the API app: every request's method and path, and each /v1/responses exchange."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []
        self.exchanges: list[Exchange] = []
        self.requests_complete = 0  # exchanges whose request body has fully arrived

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.paths.append(f"{scope['method']} {scope['path']}")
        if scope["path"] != "/v1/responses":
            return await self.app(scope, receive, send)
        exchange = Exchange({k.decode(): v.decode() for k, v in scope["headers"]})
        self.exchanges.append(exchange)

        async def receiving() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                exchange.body += message.get("body", b"")
                if not message.get("more_body"):
                    self.requests_complete += 1
            return message

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
            elif message["type"] == "http.response.body":
                exchange.answer += message.get("body", b"")
            await send(message)

        await self.app(scope, receiving, sending)


@contextmanager
def outbound_trap() -> Iterator[tuple[str, list[str]]]:
    """A proxy on 127.0.0.1 that refuses everything and notes what was asked of it: Codex gets it as HTTP(S)_PROXY
    (NO_PROXY for 127.0.0.1), so a request to anywhere else ends here instead of on the network."""
    attempts: list[str] = []

    class Refuse(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            attempts.append(f"{self.command} {self.path}")
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_CONNECT = do_GET = do_POST = do_PUT = do_HEAD = _refuse  # http.server's naming

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", attempts
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def served(client: Any) -> Iterator[tuple[str, Recorder]]:
    recorder = Recorder(create_app(ServerSettings(api_key=KEY, served_name=MODEL), client=client))
    with serving(recorder) as base:
        yield base, recorder


# ----- Codex ---------------------------------------------------------------------------------------------------

README_SECTION = "The Responses API: Codex CLI, the OpenAI Agents SDK"


def readme_configuration(base_url: str) -> tuple[str, str]:
    """The Codex configuration of docs/api.md (its config.toml, on this server's port) and the name of the environment
    variable its provider takes the key from, as its shell example sets it."""
    from tests.api.test_readme_examples import block, on_port

    config = on_port(block(README_SECTION, "toml").text, int(base_url.rsplit(":", 1)[1]))
    settings = tomllib.loads(config)
    [provider] = settings["model_providers"].values()
    assert settings["model_provider"] in settings["model_providers"] and provider["wire_api"] == "responses"
    shell = block(README_SECTION, "bash").text.splitlines()
    exported = shell[0].removeprefix("export ").split("=")[0]
    assert exported == provider["env_key"] and shell[1].startswith('codex exec "'), shell
    return config, exported


def codex_exec(binary: Path, base_url: str, proxy: str, tmp_path: Path, prompt: str,
               *extra: str) -> subprocess.Popen[str]:
    """`codex exec` on our server, configured by the README's config.toml (in a throwaway CODEX_HOME) and key
    variable. The -c flags and options added to it, each for a reason:
    - the served model's name (-m), and no retries, so that an error shows at once, as Codex's stderr;
    - no network besides the server: analytics off (else ab.chatgpt.com), plugins off (else a git fetch from
      github.com, then api.github.com and chatgpt.com); the update check, apps and remote plugins off too, though
      `codex exec` without a ChatGPT login calls none;
    - commands run unsandboxed and unasked (`danger-full-access`, approvals `never`): the only one is a fixed
      `echo` in a temporary folder, and Codex's Linux sandbox fails here anyway (bwrap cannot find its
      codex-linux-sandbox helper, which Codex declines to link under a temporary CODEX_HOME) and needs user
      namespaces, which CI containers may not allow."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    config, key_variable = readme_configuration(base_url)
    (home / ".codex" / "config.toml").write_text(config)
    provider = tomllib.loads(config)["model_provider"]
    command = [
        str(binary), "exec", "--skip-git-repo-check", "--color", "never", "-C", str(work), "-m", MODEL,
        "-c", f"model_providers.{provider}.request_max_retries=0",
        "-c", f"model_providers.{provider}.stream_max_retries=0",
        "-s", "danger-full-access", "-c", 'approval_policy="never"',
        "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false",
        "--disable", "plugins", "--disable", "apps", "--disable", "remote_plugin",
        *extra, prompt,
    ]
    # Nothing of the user's own environment (an OPENAI_API_KEY, a CODEX_HOME) reaches it.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
           "LANG": "C.UTF-8", key_variable: KEY, "NO_PROXY": "127.0.0.1,localhost",
           "no_proxy": "127.0.0.1,localhost",
           **{name: proxy for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy",
                                        "all_proxy")}}
    return subprocess.Popen(command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(process: subprocess.Popen[str], timeout_s: float = 0) -> tuple[str, str]:
    """Codex's stdout and stderr once it exits by itself within `timeout_s`, or is stopped (with the commands it
    started: it runs in a process group of its own)."""
    try:
        return process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop(process)
        return process.communicate()


def function_tools(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in request["tools"] if tool["type"] == "function"}


def streamed_message(events: list[dict[str, Any]]) -> str:
    """The text of the assistant message items the server finished (response.output_item.done)."""
    return "".join(part["text"] for event in events if event["type"] == "response.output_item.done"
                   and event["item"]["type"] == "message" for part in event["item"]["content"]
                   if part["type"] == "output_text")


def scripted_client(folder: Path, pieces: list[str]) -> HFClient:
    """A model that answers every request with `pieces` (tests/tiny_model.py), whose config gives it a context of
    CONTEXT tokens (the scripted network does not look at positions: any length works), loaded as the server does."""
    from transformers import AutoConfig

    build_scripted_model(folder, pieces, family="qwen")  # Qwen2.5's chat template, Hermes tool calls
    config = AutoConfig.from_pretrained(folder)
    config.max_position_embeddings = CONTEXT
    config.save_pretrained(folder)
    client = HFClient(ModelSettings(dtype="float32", model_path=str(folder), device="cpu"))
    assert client.context_window == CONTEXT  # from the config
    return client


# ----- the tests -----------------------------------------------------------------------------------------------

def test_codex_prints_the_answer_our_server_streamed(codex, tmp_path, smollm2_dir):
    """One turn, answered with text: Codex finishes cleanly and prints exactly the text the server streamed."""
    answer = "Hello from the composite demo!"
    client = scripted_client(tmp_path / "model", ["Hello", " from", " the", " composite", " demo", "!"])

    with outbound_trap() as (proxy, attempts), served(client) as (base, recorder):
        started = time.monotonic()
        process = codex_exec(codex, base, proxy, tmp_path, "Say hello.", "-o", str(tmp_path / "last-message.txt"))
        stdout, stderr = finish(process, CODEX_TIMEOUT_S)
        elapsed = time.monotonic() - started

    assert process.returncode == 0, f"codex exec failed after {elapsed:.0f} s:\n{stderr}"
    assert "ERROR" not in stderr, stderr
    assert recorder.paths == ["POST /v1/responses"] and attempts == []
    [exchange] = recorder.exchanges
    assert exchange.status == 200, exchange.answer.decode()
    assert exchange.headers["authorization"] == f"Bearer {KEY}"
    request = exchange.request()
    assert request["model"] == MODEL and request["stream"] is True
    # Codex's sub-agent tools come as a `namespace` of functions, which the server took; web search is off.
    assert {tool["type"] for tool in request["tools"]} == {"function", "namespace"}

    # The prompt needs the long context: several times the 4096 tokens the tiny models have by default.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    texts = [part["text"] for item in request["input"] if item.get("type") == "message" for part in item["content"]]
    prompt_tokens = len(tokenizer("\n".join([*texts, json.dumps(request["tools"])]))["input_ids"])
    assert 4096 * 4 < prompt_tokens < CONTEXT - 1024
    # What the README says of SmolLM2: Codex's prompt is over its 8,192 tokens, and fits in 16,000.
    smollm2 = AutoTokenizer.from_pretrained(smollm2_dir)
    assert 8192 < len(smollm2("\n".join([*texts, json.dumps(request["tools"])]))["input_ids"]) < 16000
    events = exchange.events()
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["usage"]["input_tokens"] > 4096 * 4  # the server read all of it

    assert streamed_message(events) == answer
    assert (tmp_path / "last-message.txt").read_text() == answer
    assert stdout == answer + "\n"


def test_codex_runs_the_command_our_model_calls_and_sends_back_its_output(codex, tmp_path):
    """The model answers with a Hermes tool call of Codex's shell tool: Codex runs the command, and its next
    request carries the call and the command's output."""
    client = scripted_client(tmp_path / "model", ["<tool_call>", json.dumps(CALL), "</tool_call>"])

    with outbound_trap() as (proxy, attempts), served(client) as (base, recorder):
        process = codex_exec(codex, base, proxy, tmp_path, f"Run `echo {MARK}` in the shell.", "--json")
        # The model calls the command again whatever the result, so Codex would go on: stop it once its second
        # request has arrived.
        deadline = time.monotonic() + CODEX_TIMEOUT_S
        while recorder.requests_complete < 2 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        stdout, stderr = finish(process)

    assert recorder.requests_complete >= 2, f"Codex sent {recorder.requests_complete} request(s); stderr:\n{stderr}"
    assert set(recorder.paths) == {"POST /v1/responses"} and attempts == []
    first, second = recorder.exchanges[:2]
    shell = function_tools(first.request())["exec_command"]
    assert shell["parameters"]["required"] == ["cmd"]

    # What the server sent: the model's call as a function_call item.
    assert first.status == 200
    [call] = [event["item"] for event in first.events()
              if event["type"] == "response.output_item.done" and event["item"]["type"] == "function_call"]
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == CALL["arguments"]

    # What Codex sent back: that call, then the command's output under the same call id.
    items = second.request()["input"]
    calls = [item for item in items if item.get("type") == "function_call"]
    outputs = [item for item in items if item.get("type") == "function_call_output"]
    assert [(c["call_id"], c["name"], json.loads(c["arguments"])) for c in calls] == \
        [(call["call_id"], "exec_command", CALL["arguments"])]
    [output] = outputs
    assert output["call_id"] == call["call_id"]
    lines = output["output"].splitlines()
    assert MARK in lines and "Process exited with code 0" in lines, output["output"]  # the echo's own output

    # And as Codex reported it (--json: one event a line, until it was stopped).
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    ran = [event["item"] for event in events if event["type"] == "item.completed"
           and event["item"]["type"] == "command_execution"]
    assert ran and ran[0]["command"].endswith(f"'echo {MARK}'"), stdout
    assert ran[0]["aggregated_output"] == f"{MARK}\n" and ran[0]["exit_code"] == 0
