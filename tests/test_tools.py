"""The tool registry and the built-in tools, called through the registry as the model's calls are."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from app.tools import load_tools
from app.tools.registry import ToolError, ToolRegistry

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
    def do_GET(self):  # noqa: N802 (http.server's naming)
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


def test_get_weather_offline_is_a_clear_observation(monkeypatch):
    with socket_closed_port() as port:
        monkeypatch.setenv("DEMO_WEATHER_GEOCODING_URL", f"http://127.0.0.1:{port}/v1/search")
        result = registry.call("get_weather", {"city": "Paris"})
    assert not result.ok and "could not be reached" in result.content and "offline" in result.content


class socket_closed_port:  # noqa: N801 - used as a context manager
    """A port on 127.0.0.1 that nothing listens on."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()
