"""Named things in one table: the app's backends, tool-call dialects and built-in tools.

An entry is eager (the value itself) or lazy: a "module:attribute" reference, imported the first time the entry is
read, so that listing the names (a sidebar's options, an error message) loads nothing: the transformers backend
imports torch, the vLLM one vLLM. Entries keep the order they were added in. A registry may `build` each value once
from what it names (a dialect's class -> its shared instance).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def load(reference: str) -> Any:
    """The object a "module:attribute" reference names (the attribute may be dotted: "module:Class.method")."""
    module_name, colon, attribute = reference.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(f"{reference!r} is not a 'module:attribute' reference")
    found: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


class Registry(Mapping[str, T], Generic[T]):
    """`what` names the kind of entry in messages ("backend", "tool-call dialect")."""

    def __init__(self, what: str, build: Callable[[Any], T] | None = None) -> None:
        self.what = what
        self._build = build
        self._references: dict[str, str | None] = {}  # name -> "module:attribute", None for an eager entry
        self._values: dict[str, T] = {}

    def add(self, name: str, value: Any) -> None:
        """An eager entry (built now when the registry builds its values). A taken name is refused."""
        self._refuse_taken(name)
        self._references[name] = None
        self._values[name] = self._build(value) if self._build is not None else value

    def add_lazy(self, name: str, reference: str) -> None:
        """A lazy entry: `reference` ("module:attribute") is imported when the entry is first read."""
        self._refuse_taken(name)
        module_name, colon, attribute = reference.partition(":")
        if not colon or not module_name or not attribute:
            raise ValueError(f"{reference!r} is not a 'module:attribute' reference")
        self._references[name] = reference

    def remove(self, name: str) -> None:
        del self._references[name]
        self._values.pop(name, None)

    def reference(self, name: str) -> str | None:
        """Where a lazy entry comes from ("module:attribute"); None for an eager one."""
        return self._references[name]

    def unknown(self, name: str) -> str:
        """The message for a name that is not here."""
        return f"unknown {self.what} {name!r}; choose one of: {', '.join(self._references)}"

    def _refuse_taken(self, name: str) -> None:
        if name in self._references:
            where = self._references[name] or "an entry added before"
            raise ValueError(f"{self.what} {name!r} is defined twice (the first: {where})")

    def __getitem__(self, name: str) -> T:
        if name not in self._values:
            reference = self._references[name]  # KeyError for an unknown name, as a Mapping says
            assert reference is not None  # an eager entry always has its value
            loaded = load(reference)
            self._values[name] = self._build(loaded) if self._build is not None else loaded
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._references

    def __iter__(self) -> Iterator[str]:
        return iter(self._references)

    def __len__(self) -> int:
        return len(self._references)
