"""get_weather over Open-Meteo's free public API (no key): geocode the city, then read the current weather.

The endpoints can be pointed elsewhere (a mirror, or a local stand-in in tests) with DEMO_WEATHER_GEOCODING_URL
and DEMO_WEATHER_FORECAST_URL. Offline, the model gets a clear observation instead of an exception. The reading
comes back as text and, for programs, structured (WEATHER_SCHEMA).
"""

from __future__ import annotations

import httpx

from app.config import WeatherSettings
from app.tools.tool_registry import ToolError, ToolHints, ToolOutput, json_number, register_tool

TIMEOUT_S = 5.0
_CURRENT = "temperature_2m,apparent_temperature,relative_humidity_2m,wind_speed_10m,weather_code"
# WMO weather interpretation codes, as documented by Open-Meteo.
_WMO = {
    0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast", 45: "fog", 48: "rime fog",
    51: "light drizzle", 53: "drizzle", 55: "dense drizzle", 56: "freezing drizzle", 57: "freezing drizzle",
    61: "light rain", 63: "rain", 65: "heavy rain", 66: "freezing rain", 67: "freezing rain",
    71: "light snow", 73: "snow", 75: "heavy snow", 77: "snow grains", 80: "light showers", 81: "showers",
    82: "violent showers", 85: "snow showers", 86: "heavy snow showers", 95: "thunderstorm",
    96: "thunderstorm with hail", 99: "thunderstorm with heavy hail",
}

_NUMBER = {"type": ["number", "null"]}  # null: Open-Meteo sent no number
_MEASUREMENT = {"type": "object", "properties": {"value": _NUMBER, "unit": {"type": "string"}},
                "required": ["value", "unit"], "additionalProperties": False}
_FIELDS = {
    "place": {"type": "string"}, "latitude": _NUMBER, "longitude": _NUMBER,
    "time": {"type": ["string", "null"], "description": "the reading's local time, as Open-Meteo gives it"},
    "sky": {"type": "string"}, "weather_code": {"type": ["integer", "null"], "description": "WMO code"},
    "temperature": _MEASUREMENT, "feels_like": _MEASUREMENT, "humidity": _MEASUREMENT, "wind_speed": _MEASUREMENT,
}
WEATHER_SCHEMA = {"type": "object", "properties": _FIELDS, "required": list(_FIELDS), "additionalProperties": False}


# Read-only, but open-world: it asks Open-Meteo (or the service the environment names) over the internet.
@register_tool(timeout_s=15, hints=ToolHints.reader("Weather (Open-Meteo)", open_world=True),
               output_schema=WEATHER_SCHEMA)
def get_weather(city: str) -> ToolOutput:
    """Get the current weather in a city from the Open-Meteo service (needs internet access).

    Args:
        city: The city name, e.g. "Paris" or "New York".
    """
    name = city.strip()
    if not name:
        raise ToolError("the city name is empty.")
    endpoints = WeatherSettings.from_env()
    geocoding, forecast = endpoints.geocoding_url, endpoints.forecast_url
    try:
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as http:
            places = _get_json(http, geocoding, {"name": name, "count": 1, "format": "json"}).get("results") or []
            if not places:
                raise ToolError(f"no place called {name!r} was found.")
            place = places[0]
            weather = _get_json(http, forecast, {"latitude": place["latitude"], "longitude": place["longitude"],
                                                 "current": _CURRENT, "timezone": "auto"})
    except (httpx.ConnectError, httpx.TimeoutException, httpx.NetworkError) as exc:
        raise ToolError(f"the weather service could not be reached ({type(exc).__name__}): this computer seems to "
                        "be offline, so no weather data is available.") from None
    current, units = weather.get("current") or {}, weather.get("current_units") or {}
    if "temperature_2m" not in current:
        raise ToolError("the weather service answered without current weather data.")
    where = ", ".join(str(part) for part in (place.get("name"), place.get("country")) if part)

    def value(key: str) -> str:
        return f"{current.get(key)}{units.get(key, '')}"

    def measurement(key: str) -> dict[str, object]:
        return {"value": json_number(current.get(key)), "unit": str(units.get(key, ""))}

    code = current.get("weather_code")
    known = isinstance(code, int | float) and code in _WMO  # Open-Meteo sends an integer; 3.0 finds 3 as well
    sky = _WMO[int(code)] if known else f"weather code {code}"  # type: ignore[arg-type]  # a number: checked above
    text = (f"{where} at {current.get('time', 'now')} (local time): {sky}, {value('temperature_2m')} "
            f"(feels like {value('apparent_temperature')}), humidity {value('relative_humidity_2m')}, "
            f"wind {value('wind_speed_10m')}.")
    number = json_number(code)
    when = current.get("time")
    return ToolOutput(text, structured={
        "place": where, "latitude": json_number(place.get("latitude")),
        "longitude": json_number(place.get("longitude")), "time": None if when is None else str(when), "sky": sky,
        "weather_code": int(number) if number is not None and float(number).is_integer() else None,
        "temperature": measurement("temperature_2m"), "feels_like": measurement("apparent_temperature"),
        "humidity": measurement("relative_humidity_2m"), "wind_speed": measurement("wind_speed_10m"),
    })


def _get_json(http: httpx.Client, url: str, params: dict) -> dict:
    response = http.get(url, params=params)
    if response.status_code != 200:
        raise ToolError(f"the weather service answered HTTP {response.status_code}.")
    try:
        data = response.json()
    except ValueError:
        raise ToolError("the weather service sent something that is not JSON.") from None
    if not isinstance(data, dict):
        raise ToolError("the weather service sent an unexpected answer.")
    return data
