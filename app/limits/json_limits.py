"""Decoding JSON that comes from a model or a client without letting it crash or stall the decoder.

`json.loads` raises more than JSONDecodeError on hostile input: RecursionError for deep nesting (or a crash deeper
down, where the decoded value is dumped or rendered again), ValueError for an integer longer than Python's
int-string conversion limit, MemoryError for huge input. The functions here check size and nesting first, in one
linear pass, and turn anything else the decoder raises into `JSONLimitError`, which is a JSONDecodeError: code
that already treats bad JSON as "not a call" / "not valid arguments" handles these inputs the same way.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any, TypeVar

# Tool arguments are a few levels deep; 64 is far beyond any real schema yet far below the interpreter's recursion
# limit (about 1000), which json, copy.deepcopy, json.dumps and Jinja's tojson all have to stay under later on.
MAX_DEPTH = 64
# A million characters is more than any reply or tool call a local model writes in a turn (about 250k tokens);
# beyond it the text is refused before any decoding work is spent on it.
MAX_CHARS = 1_000_000

# A JSON string, or, if it is never closed, the rest of the text (escapes consumed in pairs; linear, no backtracking).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SEPARATORS = re.compile(r"\s*")

_T = TypeVar("_T")


class JSONLimitError(json.JSONDecodeError):
    """The text is over a limit of this module (size, nesting, a number's length) or the decoder gave up on it.
    A JSONDecodeError (and so a ValueError), so every caller that handles bad JSON handles this too."""

    def __init__(self, msg: str, doc: str) -> None:
        super().__init__(msg, doc, 0)


def nesting_depth(text: str) -> int:
    """How deep brackets nest in `text`, outside JSON strings. Linear, and done by the regex engine and C iterators:
    it must stay cheap on exactly the inputs it is there to refuse. For valid JSON this is the decoder's depth;
    for invalid JSON it is exact up to where the decoder would fail, which is all a check before decoding needs."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def check_limits(text: str, max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS) -> None:
    """Raise JSONLimitError if `text` is longer than `max_chars` or nests deeper than `max_depth`."""
    if len(text) > max_chars:
        raise JSONLimitError(f"longer than {max_chars} characters", text)
    if nesting_depth(text) > max_depth:
        raise JSONLimitError(f"nested deeper than {max_depth} levels", text)


def loads_bounded(text: str, max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS) -> Any:
    """`json.loads(text)` within the limits. Raises json.JSONDecodeError for bad JSON and its subclass
    JSONLimitError for JSON over a limit; nothing else."""
    check_limits(text, max_depth, max_chars)
    return _decoding(text, lambda: json.loads(text))


def loads_sequence(text: str, separators: str = "", max_depth: int = MAX_DEPTH,
                   max_chars: int = MAX_CHARS) -> list[Any]:
    """Every JSON value in `text`, in order: values separated by whitespace and, after the first value, any of the
    characters in `separators` (Llama 3.1 writes parallel calls as `{...}; {...}`). Empty for blank text. Raises
    like `loads_bounded`; the limits apply to the whole text, which is checked once, so this stays linear."""
    check_limits(text, max_depth, max_chars)
    decoder = json.JSONDecoder()
    between = re.compile(f"[\\s{re.escape(separators)}]*") if separators else _SEPARATORS
    values: list[Any] = []
    position = _SEPARATORS.match(text).end()  # type: ignore[union-attr]  # `\s*` always matches
    while position < len(text):
        value, position = _decoding(text, functools.partial(decoder.raw_decode, text, position))
        values.append(value)
        position = between.match(text, position).end()  # type: ignore[union-attr]
    return values


def _decoding(text: str, decode: Callable[[], _T]) -> _T:
    """Run `decode`, turning what json raises besides JSONDecodeError into JSONLimitError."""
    try:
        return decode()
    except json.JSONDecodeError:
        raise
    except ValueError:  # the only other ValueError json raises: an integer over sys.get_int_max_str_digits()
        raise JSONLimitError("a number has too many digits to decode", text) from None
    except (RecursionError, MemoryError) as exc:  # not expected within the limits; kept as a last line of defence
        raise JSONLimitError(f"too complex to decode ({type(exc).__name__})", text) from None
