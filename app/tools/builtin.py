"""Sample tools that work offline. Each is a plain typed function; the docstring becomes its schema.

They only compute or read the clock: read-only and closed-world. Where a result has values a program would want
(a number, a unit, a time), it also comes back structured, under an output schema, with the same text as always.
"""

from __future__ import annotations

import json
import random
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.tools.calculator import evaluate
from app.tools.tool_registry import ToolError, ToolHints, ToolOutput, json_number, register_tool
from app.tools.units import UNITS, convert

_NUMBER: dict[str, Any] = {"type": ["number", "null"],
                           "description": "null where the text shows nan or inf, which JSON cannot hold"}


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    """An output schema: an object with exactly these properties."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


# Not idempotent in the sense of giving the same number twice, but MCP's idempotence is about effects: it has none.
@register_tool(hints=ToolHints.reader("Random number", open_world=False),
               output_schema=_object(value={"type": "integer"}))
def random_number(low: int, high: int) -> ToolOutput:
    """Draw a random whole number between two bounds, both included.

    Args:
        low: The smallest number that may be drawn.
        high: The largest number that may be drawn.
    """
    if low > high:
        raise ToolError(f"low ({low}) must not be greater than high ({high}).")
    value = random.SystemRandom().randint(low, high)
    return ToolOutput(str(value), structured={"value": value})


@register_tool(hints=ToolHints.reader("Current time", open_world=False),
               output_schema=_object(time={"type": "string", "format": "date-time",
                                           "description": "ISO 8601, with the zone's UTC offset"},
                                     timezone={"type": "string"}))
def current_time(timezone: str = "UTC") -> ToolOutput:
    """Get the current date and time in a time zone.

    Args:
        timezone: An IANA time zone name such as "Europe/Paris", "America/New_York" or "UTC".
    """
    try:
        zone = ZoneInfo(timezone.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"unknown time zone {timezone!r}; use an IANA name such as 'Europe/Paris'.") from None
    now = datetime.now(zone)
    return ToolOutput(now.strftime(f"%A %d %B %Y, %H:%M:%S ({timezone.strip()}, UTC%z)"),
                      structured={"time": now.isoformat(timespec="seconds"), "timezone": timezone.strip()})


@register_tool(hints=ToolHints.reader("Calculator", open_world=False),
               output_schema=_object(expression={"type": "string"}, value=_NUMBER))
def calculator(expression: str) -> ToolOutput:
    """Evaluate an arithmetic expression exactly as written, e.g. "2 * (3 + 4) ** 2" or "sqrt(2) / 3".

    Args:
        expression: Numbers, + - * / // % **, parentheses, and the functions sqrt, sin, cos, tan, log, exp, abs, round, and the constants pi and e.
    """  # noqa: E501 (a tool's docstring is its description, as the model reads it: one line per argument)
    value = evaluate(expression)
    return ToolOutput(f"{expression.strip()} = {value}",
                      structured={"expression": expression.strip(), "value": json_number(value)})


def convert_units(value: float, from_unit: str, to_unit: str) -> ToolOutput:
    """Convert a quantity between units of length, mass, volume, speed or temperature.

    Args:
        value: The quantity to convert.
        from_unit: The unit of the value (choices: {units})
        to_unit: The unit to convert to, of the same kind as from_unit (choices: {units})
    """
    result = convert(value, from_unit, to_unit)
    # The text rounds to 6 significant digits for the model; the structured value is the whole float.
    return ToolOutput(f"{value:g} {from_unit.strip()} = {result:.6g} {to_unit.strip()}",
                      structured={"value": json_number(result), "unit": to_unit.strip(),
                                  "from_value": json_number(value), "from_unit": from_unit.strip()})


# The unit lists become JSON Schema enums, so a constrained call can only name units the tool knows.
convert_units.__doc__ = (convert_units.__doc__ or "").replace("{units}", json.dumps(UNITS))
register_tool(convert_units, hints=ToolHints.reader("Unit conversion", open_world=False),
              output_schema=_object(value=_NUMBER, unit={"type": "string"}, from_value=_NUMBER,
                                    from_unit={"type": "string"}))
