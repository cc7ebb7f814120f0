"""The tool registry and the built-in tools, called through the registry as the model's calls are."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from jsonschema import Draft202012Validator

from app.config import SandboxLimits
from app.tools import load_tools
from app.tools.images import ImageAPI
from app.tools.python import PythonTool
from app.tools.sandbox.kernel import KernelSession
from app.tools.tool_registry import (
    EffectiveHints,
    Tool,
    ToolError,
    ToolHints,
    ToolOutput,
    ToolRegistry,
    function_schema,
)

registry = load_tools()


def test_schemas_come_from_type_hints_and_docstrings():
    schema = registry.get("random_number").schema
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["description"].startswith("Draw a random whole number")
    low = {"type": "integer", "description": "The smallest number that may be drawn."}
    assert function["parameters"]["properties"]["low"] == low
    assert function["parameters"]["required"] == ["low", "high"]
    units = registry.get("convert_units").parameters["properties"]["from_unit"]
    assert "km" in units["enum"] and "C" in units["enum"]


@pytest.mark.parametrize(
    "name, arguments, expected",
    [
        ("random_number", {"low": 1, "high": "ten"}, "high: 'ten' is not of type 'integer'"),
        ("random_number", {"low": 1}, "'high' is a required property"),
        ("random_number", {"low": 1, "high": 2, "extra": 3}, "Additional properties are not allowed"),
        ("random_number", ["not", "an", "object"], "must be a JSON object"),
        ("launch_rocket", {}, "there is no tool named 'launch_rocket'"),
        ("random_number", {"low": 5, "high": 1}, "must not be greater than"),
        ("current_time", {"timezone": "Mars/Olympus"}, "unknown time zone"),
        ("calculator", {"expression": "__import__('os').system('id')"}, "is not allowed"),
        ("calculator", {"expression": "9 ** 9 ** 9"}, "too large"),
        ("calculator", {"expression": "1 / 0"}, "division by zero"),
        ("convert_units", {"value": 1, "from_unit": "km", "to_unit": "kg"}, "cannot convert"),
    ],
)
def test_every_bad_call_is_an_error_observation(name, arguments, expected):
    result = registry.call(name, arguments)
    assert not result.ok and result.content.startswith("Error:") and expected in result.content


@pytest.mark.parametrize(
    "name, arguments, expected",
    [
        ("calculator", {"expression": "2 * (3 + 4) ** 2"}, "2 * (3 + 4) ** 2 = 98"),
        ("calculator", {"expression": "sqrt(16) + round(pi, 2)"}, "= 7.14"),
        ("convert_units", {"value": 100, "from_unit": "C", "to_unit": "F"}, "100 C = 212 F"),
        ("convert_units", {"value": 10, "from_unit": "km", "to_unit": "mi"}, "10 km = 6.21371 mi"),
        ("current_time", {"timezone": "Asia/Tokyo"}, "(Asia/Tokyo, UTC+0900)"),
        ("count_words", {"text": "one two three"}, "3 words"),
    ],
)
def test_builtin_tools(name, arguments, expected):
    result = registry.call(name, arguments)
    assert result.ok and expected in result.content and result.duration_s >= 0


def test_random_number_stays_in_range():
    values = {int(registry.call("random_number", {"low": 3, "high": 5}).content) for _ in range(50)}
    assert values <= {3, 4, 5} and len(values) > 1


def test_exceptions_and_timeouts_become_observations():
    local = ToolRegistry()

    def broken(x: int) -> str:
        """Fails.

        Args:
            x: Anything.
        """
        raise KeyError("missing")

    def slow(x: int) -> str:
        """Sleeps.

        Args:
            x: Seconds.
        """
        time.sleep(x)
        return "done"

    def polite(x: int) -> str:
        """Refuses.

        Args:
            x: Anything.
        """
        raise ToolError("I only accept even numbers.")

    local.register(broken)
    local.register(slow, timeout_s=0.3)
    local.register(polite)
    assert local.call("broken", {"x": 1}).content == "Error: broken failed: KeyError: 'missing'"
    started = time.perf_counter()
    result = local.call("slow", {"x": 5})
    assert not result.ok and "timed out after 0.3 s" in result.content and time.perf_counter() - started < 2
    assert local.call("polite", {"x": 1}).content == "Error: I only accept even numbers."


def test_a_running_call_can_be_stopped():
    local = ToolRegistry()

    def wait(seconds: float) -> str:
        """Waits.

        Args:
            seconds: How long.
        """
        time.sleep(seconds)
        return "done"

    local.register(wait, timeout_s=30)
    running = local.start("wait", {"seconds": 10})
    assert running.wait(0.05) is None
    result = running.cancel()
    assert not result.ok and "stopped" in result.content


def test_long_results_are_cut_for_the_model_only():
    local = ToolRegistry()

    def long(n: int) -> str:
        """Long.

        Args:
            n: Size.
        """
        return "y" * n

    local.register(long)
    result = local.call("long", {"n": 50_000})
    assert len(result.content) == 50_000
    assert len(result.for_model()) < 9_000 and "more characters cut" in result.for_model()


# ----- get_weather against a stand-in that speaks Open-Meteo's protocol (the real one is unreachable here) -----

class OpenMeteo(BaseHTTPRequestHandler):
    def do_GET(self):  # http.server's naming
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/v1/search":
            name = query["name"][0]
            body = {"results": [{"name": name, "latitude": 48.85, "longitude": 2.35, "country": "France"}]} \
                if name == "Paris" else {"generationtime_ms": 0.1}
        elif url.path == "/v1/forecast":
            assert "temperature_2m" in query["current"][0]
            body = {"current_units": {"temperature_2m": "°C", "apparent_temperature": "°C",
                                      "relative_humidity_2m": "%", "wind_speed_10m": "km/h"},
                    "current": {"time": "2026-11-22T23:00", "temperature_2m": 8.1, "apparent_temperature": 5.9,
                                "relative_humidity_2m": 81, "wind_speed_10m": 12.3, "weather_code": 3}}
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def open_meteo(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), OpenMeteo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    monkeypatch.setenv("DEMO_WEATHER_GEOCODING_URL", f"{base}/search")
    monkeypatch.setenv("DEMO_WEATHER_FORECAST_URL", f"{base}/forecast")
    yield
    server.shutdown()


def test_get_weather_reads_open_meteo(open_meteo):
    result = registry.call("get_weather", {"city": "Paris"})
    assert result.ok, result.content
    assert result.content == ("Paris, France at 2026-11-22T23:00 (local time): overcast, 8.1°C (feels like 5.9°C), "
                              "humidity 81%, wind 12.3km/h.")
    unknown = registry.call("get_weather", {"city": "Atlantis"})
    assert not unknown.ok and "no place called 'Atlantis'" in unknown.content


def test_get_weather_gives_the_reading_structured_too(open_meteo):
    result = registry.call("get_weather", {"city": "Paris"})
    assert result.ok and result.content.startswith("Paris, France at 2026-11-22T23:00 (local time): overcast")
    Draft202012Validator(registry.get("get_weather").output_schema).validate(result.structured)
    assert result.structured == {
        "place": "Paris, France", "latitude": 48.85, "longitude": 2.35, "time": "2026-11-22T23:00", "sky": "overcast",
        "weather_code": 3, "temperature": {"value": 8.1, "unit": "°C"}, "feels_like": {"value": 5.9, "unit": "°C"},
        "humidity": {"value": 81, "unit": "%"}, "wind_speed": {"value": 12.3, "unit": "km/h"}}
    assert registry.call("get_weather", {"city": "Atlantis"}).structured is None  # a failure has none


def test_get_weather_offline_is_a_clear_observation(monkeypatch):
    with socket_closed_port() as port:
        monkeypatch.setenv("DEMO_WEATHER_GEOCODING_URL", f"http://127.0.0.1:{port}/v1/search")
        result = registry.call("get_weather", {"city": "Paris"})
    assert not result.ok and "could not be reached" in result.content and "offline" in result.content


class socket_closed_port:  # used as a context manager
    """A port on 127.0.0.1 that nothing listens on."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


# ----- hints (MCP's tool annotations) and structured results ------------------------------------------------------

def test_unsaid_hints_take_mcps_defaults_and_read_only_makes_the_rest_moot():
    assert ToolHints().effective == EffectiveHints(read_only=False, destructive=True, idempotent=False,
                                                   open_world=True)
    said = ToolHints(read_only=False, destructive=False, idempotent=True, open_world=False)
    assert said.effective == EffectiveHints(read_only=False, destructive=False, idempotent=True, open_world=False)
    # A read-only tool cannot destroy anything, nor change anything on a second call, whatever else it says.
    odd = ToolHints(read_only=True, destructive=True, idempotent=False)
    assert odd.effective == EffectiveHints(read_only=True, destructive=False, idempotent=True, open_world=True)
    assert ToolHints.reader("Look", open_world=False) == ToolHints(True, False, True, False, "Look")


@pytest.mark.parametrize(("name", "title", "open_world"), [
    ("calculator", "Calculator", False), ("convert_units", "Unit conversion", False),
    ("current_time", "Current time", False), ("random_number", "Random number", False),
    ("get_weather", "Weather (Open-Meteo)", True),  # it asks Open-Meteo over the internet
])
def test_builtin_tools_say_they_only_read(name, title, open_world):
    hints = registry.get(name).hints
    assert hints == ToolHints(read_only=True, destructive=False, idempotent=True, open_world=open_world, title=title)


def test_the_users_own_tool_says_nothing_and_is_taken_as_possibly_destructive():
    effective = registry.get("count_words").hints.effective
    assert not effective.read_only and effective.destructive and effective.open_world


@pytest.mark.parametrize(("limits", "reaches_out", "title"), [
    (SandboxLimits(), False, "Python (sandboxed)"),
    (SandboxLimits(network=True), True, "Python (sandboxed)"),
    (SandboxLimits(isolation="none"), True, "Python (not sandboxed)"),
])
def test_the_python_tools_hints_follow_its_isolation(tmp_path, limits, reaches_out, title):
    kernel = KernelSession(tmp_path / "session", limits)  # never started: the hints read its limits only
    try:
        hints = PythonTool(kernel).hints
    finally:
        kernel.shutdown()
    assert hints == ToolHints(read_only=False, destructive=reaches_out, idempotent=False, open_world=reaches_out,
                              title=title)
    assert ImageAPI.HINTS.effective == EffectiveHints(read_only=False, destructive=False, idempotent=False,
                                                      open_world=True)


@pytest.mark.parametrize(("name", "arguments", "text", "structured"), [
    ("calculator", {"expression": " 2 * (3 + 4) ** 2 "}, "2 * (3 + 4) ** 2 = 98",
     {"expression": "2 * (3 + 4) ** 2", "value": 98}),
    ("calculator", {"expression": "1e308 * 10"}, "1e308 * 10 = inf", {"expression": "1e308 * 10", "value": None}),
    ("convert_units", {"value": 10, "from_unit": "km", "to_unit": "mi"}, "10 km = 6.21371 mi",
     {"value": 6.2137119223733395, "unit": "mi", "from_value": 10, "from_unit": "km"}),
    ("random_number", {"low": 7, "high": 7}, "7", {"value": 7}),
])
def test_structured_results_come_with_the_same_text(name, arguments, text, structured):
    result = registry.call(name, arguments)
    assert result.ok and result.content == text and result.structured == structured
    Draft202012Validator(registry.get(name).output_schema).validate(result.structured)


def test_current_time_gives_an_iso_time_in_its_zone():
    result = registry.call("current_time", {"timezone": "Asia/Tokyo"})
    assert result.ok and "(Asia/Tokyo, UTC+0900)" in result.content
    assert result.structured["timezone"] == "Asia/Tokyo" and result.structured["time"].endswith("+09:00")
    Draft202012Validator(registry.get("current_time").output_schema).validate(result.structured)


def test_a_structured_result_that_breaks_its_schema_is_left_out_and_the_text_stays():
    local = ToolRegistry()

    def measure(wrong: bool) -> ToolOutput:
        """Measures.

        Args:
            wrong: Whether to get it wrong.
        """
        return ToolOutput("3 m", structured={"value": "three" if wrong else 3})

    local.register(measure, output_schema={"type": "object", "properties": {"value": {"type": "number"}}})
    assert local.call("measure", {"wrong": False}).structured == {"value": 3}
    wrong = local.call("measure", {"wrong": True})
    assert wrong.ok and wrong.structured is None
    assert wrong.content == ("3 m\n[The structured result was left out: it does not match the tool's output schema "
                             "(value: 'three' is not of type 'number').]")
    with pytest.raises(ValueError, match="root has \"type\": \"object\""):
        local.register(measure, output_schema={"type": "array"})
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        local.register(measure, output_schema={"type": "object", "properties": {"value": {"type": "numeric"}}})


def test_a_schemas_remote_ref_is_never_fetched():
    """A tool's schema may come from an MCP server: a $ref to a URL must not make the app request it."""
    requests: list[str] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_GET(self):  # http.server's naming
            requests.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/schema.json"
        parameters = {"type": "object", "properties": {"a": {"$ref": url}, "b": {"$ref": "#/$defs/b"}},
                      "$defs": {"b": {"type": "integer"}}}
        local = ToolRegistry()
        local.add(Tool("remote", lambda **_: ToolOutput("ran", structured={"x": 1}),
                       function_schema("remote", "Remote.", parameters),
                       output_schema={"type": "object", "properties": {"x": {"$ref": url}}}))
        assert local.validation_error("remote", {"b": "two"}) == "Error: invalid arguments for remote: b: 'two' is " \
            "not of type 'integer'."  # a $ref inside the schema itself still works
        refused = local.call("remote", {"a": 1})
        assert not refused.ok and refused.content.startswith("Error: the parameters schema of remote cannot be used")
        ran = local.call("remote", {"b": 2})
        assert ran.ok and ran.structured is None
        assert ran.content.startswith("ran\n[The structured result was left out: the tool's output schema cannot be "
                                      "used")
    finally:
        server.shutdown()
    assert requests == []
