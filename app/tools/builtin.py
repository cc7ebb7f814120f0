"""Sample tools that work offline. Each is a plain typed function; the docstring becomes its schema."""

from __future__ import annotations

import json
import random
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.tools.calculator import evaluate
from app.tools.registry import ToolError, register_tool
from app.tools.units import UNITS, convert


@register_tool
def random_number(low: int, high: int) -> int:
    """Draw a random whole number between two bounds, both included.

    Args:
        low: The smallest number that may be drawn.
        high: The largest number that may be drawn.
    """
    if low > high:
        raise ToolError(f"low ({low}) must not be greater than high ({high}).")
    return random.SystemRandom().randint(low, high)


@register_tool
def current_time(timezone: str = "UTC") -> str:
    """Get the current date and time in a time zone.

    Args:
        timezone: An IANA time zone name such as "Europe/Paris", "America/New_York" or "UTC".
    """
    try:
        zone = ZoneInfo(timezone.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"unknown time zone {timezone!r}; use an IANA name such as 'Europe/Paris'.") from None
    now = datetime.now(zone)
    return now.strftime(f"%A %d %B %Y, %H:%M:%S ({timezone.strip()}, UTC%z)")


@register_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly as written, e.g. "2 * (3 + 4) ** 2" or "sqrt(2) / 3".

    Args:
        expression: Numbers, + - * / // % **, parentheses, and the functions sqrt, sin, cos, tan, log, exp, abs, round, and the constants pi and e.
    """  # noqa: E501 (a tool's docstring is its description, as the model reads it: one line per argument)
    return f"{expression.strip()} = {evaluate(expression)}"


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a quantity between units of length, mass, volume, speed or temperature.

    Args:
        value: The quantity to convert.
        from_unit: The unit of the value (choices: {units})
        to_unit: The unit to convert to, of the same kind as from_unit (choices: {units})
    """
    result = convert(value, from_unit, to_unit)
    return f"{value:g} {from_unit.strip()} = {result:.6g} {to_unit.strip()}"


# The unit lists become JSON Schema enums, so a constrained call can only name units the tool knows.
convert_units.__doc__ = (convert_units.__doc__ or "").replace("{units}", json.dumps(UNITS))
register_tool(convert_units)
