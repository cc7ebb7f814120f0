"""pydantic's errors about a user's file, in one line a person can act on."""

from __future__ import annotations

from pydantic import ValidationError


def describe(error: ValidationError, where: str, shown: int = 3) -> str:
    """The errors as `target 2 ('Hot'): sampling.temperature: Input should be less than or equal to 5`."""
    lines = []
    for item in error.errors(include_url=False)[:shown]:
        location = ".".join(str(part) for part in item["loc"])
        what = str(item["ctx"]["error"]) if item["type"] == "value_error" else item["msg"]
        if item["type"] == "extra_forbidden":
            what = "unknown key"
        lines.append(": ".join(part for part in (where, location, what) if part))
    more = error.error_count() - shown
    return "; ".join(lines) + (f" (and {more} more problems)" if more > 0 else "")
