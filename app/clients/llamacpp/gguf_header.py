"""A GGUF file's header, read for the model library: its key/value metadata and the shapes of its tensors.

The `gguf` package's `GGUFReader` builds a Python object for every element of every array, the tokenizer's
vocabulary and merges included: about 100,000 of them for SmolLM2, which took 4-6 s per file on a 2-core machine,
on the first page load of every app process (the library lists the machine's models in the sidebar). This reads the
same header in one pass over a memory map and steps over large arrays (the tokenizer's) without building them:
about 30 ms for the same file. Type codes and layout are `gguf`'s own constants (GGUF versions 2 and 3, either byte
order). Every length and count is checked against the file's size, so a truncated or hostile file raises
`GGUFHeaderError` instead of reading past its end or allocating what it claims, and so does a file whose tensor
data ends early (a download cut short). The llama.cpp runner sizes its context from it too.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any

from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType

_SCALARS = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}
MAX_ARRAY_KEPT = 1024  # an array longer than this (a vocabulary, merges, scores) is stepped over: its value is None
_MAX_DIMS = 8  # ggml has 4; a tensor claiming more is a broken file


class GGUFHeaderError(ValueError):
    """The file is not a GGUF file this reader understands, or its header is cut short or inconsistent."""


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    fields: dict[str, Any]  # key -> int, float, bool, str, a list of those, or None (an array too long to keep)
    tensor_elements: int  # the sum over tensors of their element counts: the model's parameters


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    with open(path, "rb") as file:
        try:
            memory = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as exc:  # an empty file cannot be mapped
            raise GGUFHeaderError("the file is empty") from exc
        with memory:
            return _Parser(memory).header()


class _Parser:
    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.size = len(data)
        self.offset = 0
        self.order = "<"

    def header(self) -> GGUFHeader:
        if self.size < 24 or struct.unpack_from("<I", self.data, 0)[0] != GGUF_MAGIC:
            raise GGUFHeaderError("no GGUF magic at the start")
        self.offset = 4
        version = self._scalar("I")
        if version & 0xFFFF == 0:  # written on a big-endian machine: the version's bytes are swapped
            self.order = ">"
            version = struct.unpack_from(">I", self.data, 4)[0]
        if version not in (2, 3):
            raise GGUFHeaderError(f"GGUF version {version} is not supported (2 and 3 are)")
        tensors, pairs = self._scalar("Q"), self._scalar("Q")
        # Each key/value pair takes at least 12 bytes and each tensor description at least 24.
        self._claim(pairs * 12 + tensors * 24, "key/value pairs and tensors")
        fields: dict[str, Any] = {}
        for _ in range(pairs):
            key = self._string()
            fields[key] = self._value(self._type())
        elements, data_length = 0, 0
        for _ in range(tensors):
            self._string()  # the tensor's name
            dims = self._scalar("I")
            if dims > _MAX_DIMS:
                raise GGUFHeaderError(f"a tensor claims {dims} dimensions")
            count = 1
            for _ in range(dims):
                count *= self._scalar("Q")
            block, block_bytes = self._quantization(self._scalar("I"))
            data_length = max(data_length, self._scalar("Q") + count // block * block_bytes)
            elements += count
        alignment = fields.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0:
            raise GGUFHeaderError(f"general.alignment is {alignment!r}")
        data_start = -(-self.offset // alignment) * alignment
        if data_start + data_length > self.size:  # a download cut short: llama.cpp would refuse it
            raise GGUFHeaderError(f"the tensor data is cut short: the file has {self.size:,} of its "
                                  f"{data_start + data_length:,} bytes")
        return GGUFHeader(version, fields, elements)

    @staticmethod
    def _quantization(code: int) -> tuple[int, int]:
        try:
            return GGML_QUANT_SIZES[GGMLQuantizationType(code)]
        except (ValueError, KeyError):
            raise GGUFHeaderError(f"unknown tensor type {code}") from None

    def _claim(self, length: int, what: str) -> None:
        if length < 0 or self.offset + length > self.size:
            raise GGUFHeaderError(f"the header is cut short: {what} run past the end of the file")

    def _scalar(self, code: str) -> Any:
        width = struct.calcsize(code)
        self._claim(width, "a value")
        value = struct.unpack_from(self.order + code, self.data, self.offset)[0]
        self.offset += width
        return value

    def _type(self) -> GGUFValueType:
        code = self._scalar("I")
        try:
            return GGUFValueType(code)
        except ValueError:
            raise GGUFHeaderError(f"unknown value type {code}") from None

    def _skip_string(self) -> int:
        """Step over a string; where it started."""
        length: int = self._scalar("Q")
        self._claim(length, "a string")
        self.offset += length
        return self.offset - length

    def _string(self) -> str:
        start = self._skip_string()
        return bytes(self.data[start:self.offset]).decode("utf-8", errors="replace")

    def _value(self, kind: GGUFValueType) -> Any:
        if kind == GGUFValueType.STRING:
            return self._string()
        if kind != GGUFValueType.ARRAY:
            return self._scalar(_SCALARS[kind])
        item = self._type()
        count = self._scalar("Q")
        if count <= MAX_ARRAY_KEPT:
            return [self._value(item) for _ in range(count)]
        if item in _SCALARS:  # a fixed width: stepped over at once
            width = struct.calcsize(_SCALARS[item])
            self._claim(count * width, "an array")
            self.offset += count * width
        elif item == GGUFValueType.STRING:
            self._claim(count * 8, "an array of strings")
            for _ in range(count):
                self._skip_string()
        else:  # arrays of arrays
            self._claim(count * 12, "an array of arrays")
            for _ in range(count):
                self._value(item)
        return None
