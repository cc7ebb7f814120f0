"""The GGUF header reader of the model library and the llama.cpp runner (app/clients/llamacpp/gguf_header.py):
against the `gguf` package's own reader on the embedded SmolLM2 file and on files written by the package's writer
(both byte orders, every value type, arrays short and long), and on truncated and hostile files."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from app.clients.embedded_model import gguf_path
from app.clients.llamacpp.gguf_header import MAX_ARRAY_KEPT, GGUFHeaderError, read_header
from app.clients.llamacpp.runner import context_size


def reference(path: Path) -> tuple[dict[str, Any], int]:
    """What gguf's GGUFReader says: every field's value, and the tensors' element count."""
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    return fields, sum(int(tensor.n_elements) for tensor in reader.tensors)


def flat(values: list[Any]) -> list[Any]:
    return [item for value in values for item in (flat(value) if isinstance(value, list) else [value])]


def same(ours: Any, theirs: Any) -> bool:
    """Equal as float32 for floats; a nested array equal to GGUFReader's, which flattens it (ours keeps it nested)."""
    if isinstance(ours, float) or isinstance(theirs, float):
        return bool(np.float32(ours) == np.float32(theirs))
    if isinstance(ours, list):
        ours = flat(ours)
        return isinstance(theirs, list) and len(ours) == len(theirs) and all(map(same, ours, theirs))
    return bool(ours == theirs)


def assert_agrees_with_gguf(path: Path) -> dict[str, Any]:
    header = read_header(path)
    fields, elements = reference(path)
    assert header.tensor_elements == elements
    # GGUFReader adds the header's own counts as pseudo-fields ("GGUF.version", ...); the file's keys are the rest.
    assert set(header.fields) == {name for name in fields if not name.startswith("GGUF.")}
    for name, value in header.fields.items():
        if value is None:  # stepped over: only arrays longer than the limit
            assert isinstance(fields[name], list) and len(fields[name]) > MAX_ARRAY_KEPT, name
        else:
            assert same(value, fields[name]), (name, value, fields[name])
    return header.fields


def test_the_embedded_gguf_reads_as_gguf_reads_it_without_building_its_vocabulary():
    fields = assert_agrees_with_gguf(gguf_path())
    assert fields["general.architecture"] == "llama" and fields["llama.context_length"] == 8192
    assert fields["tokenizer.ggml.tokens"] is None and fields["tokenizer.ggml.merges"] is None  # 49,152 of each
    assert "{% for message in messages %}" in fields["tokenizer.chat_template"]


def write(path: Path, endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE, long_arrays: bool = True) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    writer.add_name("Every type")
    writer.add_context_length(4096)
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -100)
    writer.add_uint16("t.u16", 60_000)
    writer.add_int16("t.i16", -30_000)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -2_000_000_000)
    writer.add_float32("t.f32", 0.1)
    writer.add_uint64("t.u64", 2**63 + 5)
    writer.add_int64("t.i64", -(2**62))
    writer.add_float64("t.f64", 1 / 3)
    writer.add_bool("t.bool", True)
    writer.add_string("t.text", "Grüße, 世界")
    writer.add_array("t.short", [1, 2, 3])
    writer.add_array("t.words", ["a", "bb", ""])
    if long_arrays:
        writer.add_array("t.long_numbers", list(range(MAX_ARRAY_KEPT + 1)))
        writer.add_array("t.long_words", [f"token{i}" for i in range(5_000)])
    writer.add_array("t.nested", [[1, 2], [3]])
    writer.add_string("t.after", "read past the long arrays")
    writer.add_tensor("a.weight", np.zeros((3, 5, 7), dtype=np.float32))
    writer.add_tensor("b.weight", np.zeros((11,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG], ids=["little", "big"])
def test_every_value_type_reads_as_gguf_reads_it(tmp_path, endian):
    fields = assert_agrees_with_gguf(write(tmp_path / "every.gguf", endian))
    assert read_header(tmp_path / "every.gguf").tensor_elements == 3 * 5 * 7 + 11
    assert fields["t.u64"] == 2**63 + 5 and fields["t.text"] == "Grüße, 世界" and fields["t.bool"] is True
    assert fields["t.short"] == [1, 2, 3] and fields["t.words"] == ["a", "bb", ""]
    assert fields["t.long_numbers"] is None and fields["t.long_words"] is None
    assert fields["t.nested"] == [[1, 2], [3]] and fields["t.after"] == "read past the long arrays"


def test_every_cut_of_a_file_is_refused_with_a_header_error(tmp_path):
    whole = write(tmp_path / "whole.gguf", long_arrays=False).read_bytes()
    cut = tmp_path / "cut.gguf"
    data_end = len(whole) - (-11 * 4 % 32)  # the writer pads the last tensor's 11 floats to the alignment too
    for length in range(data_end):  # in the header, its padding or the tensors' data
        cut.write_bytes(whole[:length])
        with pytest.raises(GGUFHeaderError):
            read_header(cut)
    with pytest.raises(GGUFHeaderError, match=f"the file has 1,000 of its {data_end:,} bytes"):
        cut.write_bytes(whole[:1000])
        read_header(cut)
    cut.write_bytes(whole[:data_end])
    assert read_header(cut).tensor_elements == 3 * 5 * 7 + 11


def hostile(path: Path, body: bytes, tensors: int = 0, pairs: int = 1) -> Path:
    path.write_bytes(struct.pack("<IIQQ", gguf.GGUF_MAGIC, 3, tensors, pairs) + body + bytes(64))
    return path


def key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


@pytest.mark.parametrize("body, tensors, pairs, says", [
    (b"", 0, 2**62, "cut short"),  # more pairs than the file could hold
    (key("x") + struct.pack("<IQ", 8, 2**60), 0, 1, "cut short"),  # a string of an exabyte
    (key("x") + struct.pack("<IIQ", 9, 4, 2**61), 0, 1, "cut short"),  # an array of 2**61 numbers
    (key("x") + struct.pack("<IIQ", 9, 8, 2**40), 0, 1, "cut short"),  # an array of 2**40 strings
    (key("x") + struct.pack("<I", 77), 0, 1, "unknown value type 77"),
    (key("t") + struct.pack("<II", 4, 1) + key("w") + struct.pack("<I", 4_000_000), 1, 1, "dimensions"),
    (key("t") + struct.pack("<II", 4, 1) + key("w") + struct.pack("<IQIQ", 1, 8, 999, 0), 1, 1, "tensor type 999"),
    (key("t") + struct.pack("<II", 4, 1) + key("w") + struct.pack("<IQIQ", 1, 2**40, 0, 0), 1, 1, "cut short"),
], ids=["pairs", "string", "numbers", "strings", "type", "dimensions", "tensor-type", "tensor-data"])
def test_a_hostile_header_is_refused_without_allocating_what_it_claims(tmp_path, body, tensors, pairs, says):
    with pytest.raises(GGUFHeaderError, match=says):
        read_header(hostile(tmp_path / "hostile.gguf", body, tensors, pairs))


def test_files_that_are_not_gguf_are_refused(tmp_path):
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "other.gguf").write_bytes(b"PK\x03\x04" + bytes(100))
    (tmp_path / "v1.gguf").write_bytes(struct.pack("<IIII", gguf.GGUF_MAGIC, 1, 0, 0) + bytes(32))
    for name, says in (("empty", "empty"), ("other", "magic"), ("v1", "version 1")):
        with pytest.raises(GGUFHeaderError, match=says):
            read_header(tmp_path / f"{name}.gguf")


def test_the_runner_sizes_its_context_from_the_header(tmp_path):
    assert 512 <= context_size(str(gguf_path()), 0) <= 8192
    assert context_size(str(gguf_path()), 1024) == 1024
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + bytes(100))
    assert context_size(str(tmp_path / "bad.gguf"), 0) == 0  # llama.cpp's own choice, and its own error
