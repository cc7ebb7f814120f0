"""Unit conversion tables: every unit maps to a factor of its kind's base unit (temperatures are affine)."""

from __future__ import annotations

from app.tools.tool_registry import ToolError

_LINEAR: dict[str, dict[str, float]] = {
    "length": {"m": 1, "km": 1000, "cm": 0.01, "mm": 0.001, "mi": 1609.344, "yd": 0.9144, "ft": 0.3048,
               "in": 0.0254, "nmi": 1852},
    "mass": {"kg": 1, "g": 0.001, "mg": 1e-6, "t": 1000, "lb": 0.45359237, "oz": 0.028349523125, "st": 6.35029318},
    "volume": {"l": 1, "ml": 0.001, "m3": 1000, "gal": 3.785411784, "qt": 0.946352946, "pt": 0.473176473,
               "cup": 0.2365882365, "floz": 0.0295735295625},
    "speed": {"m/s": 1, "km/h": 1 / 3.6, "mph": 0.44704, "kn": 1852 / 3600},
}
_ALIASES = {
    "meter": "m", "meters": "m", "metre": "m", "kilometer": "km", "kilometers": "km", "mile": "mi", "miles": "mi",
    "foot": "ft", "feet": "ft", "inch": "in", "inches": "in", "yard": "yd", "yards": "yd",
    "kilogram": "kg", "kilograms": "kg", "gram": "g", "grams": "g", "pound": "lb", "pounds": "lb", "lbs": "lb",
    "ounce": "oz", "ounces": "oz", "liter": "l", "liters": "l", "litre": "l", "gallon": "gal", "gallons": "gal",
    "kmh": "km/h", "kph": "km/h", "celsius": "c", "°c": "c", "fahrenheit": "f", "°f": "f", "kelvin": "k",
}
_TEMPERATURE = {"c", "f", "k"}
UNITS = [unit for factors in _LINEAR.values() for unit in factors] + ["C", "F", "K"]


def _normalise(unit: str) -> str:
    key = unit.strip().lower()
    return _ALIASES.get(key, key)


def _to_kelvin(value: float, unit: str) -> float:
    return {"c": value + 273.15, "f": (value - 32) * 5 / 9 + 273.15, "k": value}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"c": value - 273.15, "f": (value - 273.15) * 9 / 5 + 32, "k": value}[unit]


def convert(value: float, from_unit: str, to_unit: str) -> float:
    source, target = _normalise(from_unit), _normalise(to_unit)
    if source in _TEMPERATURE and target in _TEMPERATURE:
        return _from_kelvin(_to_kelvin(value, source), target)
    for factors in _LINEAR.values():
        if source in factors and target in factors:
            return value * factors[source] / factors[target]
    known = ", ".join(sorted({u for factors in _LINEAR.values() for u in factors} | {"C", "F", "K"}))
    raise ToolError(f"cannot convert {from_unit!r} to {to_unit!r}: both must be the same kind of unit, one of {known}.")
