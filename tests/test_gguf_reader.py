"""The GGUF reader: exact round trip of what we write, clear errors on damage, and a fuzz run in which
nothing but our own error type may escape."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gguf_mtp.errors import FormatError
from gguf_mtp.ggufio.format import KV
from gguf_mtp.ggufio.reader import GGUFFile
from gguf_mtp.ggufio.writer import OutTensor, encode_header, write_all, write_gguf

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it


def small_gguf(path: Path, names=("a.weight", "b.weight")) -> Path:
    kvs = [KV.string("general.architecture", "qwen35"), KV.u32("qwen35.block_count", 2),
           KV.f32("x.eps", 1e-6), KV.boolean("x.flag", True),
           KV.array("x.arr", GGUFValueType.INT32, [1, 2, 3]),
           KV.array("x.strs", GGUFValueType.STRING, ["a", "bé", ""])]
    def writer(arr):  # type: ignore[no-untyped-def]
        return lambda fh, progress: write_all(fh, arr.tobytes())

    tensors = [OutTensor(n, (32, 2), 0, writer(np.arange(64, dtype=np.float32) + i)) for i, n in enumerate(names)]
    write_gguf(path, kvs, tensors)
    return path


def test_round_trip(tmp_path: Path) -> None:
    f = GGUFFile(small_gguf(tmp_path / "t.gguf"))
    assert f.get("general.architecture") == "qwen35"
    assert f.get("x.eps") == pytest.approx(1e-6)
    assert f.get("x.flag") is True
    assert f.get("x.arr") == [1, 2, 3] and f.get("x.strs") == ["a", "bé", ""]
    np.testing.assert_array_equal(f.read_tensor("b.weight").reshape(-1), np.arange(64, dtype=np.float32) + 1)
    assert f.tensors["a.weight"].offset % 32 == 0
    # re-encoding the parsed header reproduces the file's header bytes exactly
    raw = (tmp_path / "t.gguf").read_bytes()
    tensors = [OutTensor(t.name, t.shape, t.ggml_type, lambda fh, p: None) for t in f.tensors.values()]
    header, _ = encode_header(list(f.kv.values()), tensors, 32)
    assert raw[: len(header)] == header


def test_bad_magic_version_truncation(tmp_path: Path) -> None:
    good = small_gguf(tmp_path / "t.gguf").read_bytes()
    cases = {
        "magic": (b"GGML" + good[4:], "bad magic"),
        "version": (good[:4] + struct.pack("<I", 99) + good[8:], "GGUF version 99 is not supported"),
        "trunc_header": (good[:60], "truncated"),
        "trunc_data": (good[:-8], "lies beyond the end of the file"),
        "tiny": (b"GG", "too small"),
    }
    for name, (data, msg) in cases.items():
        p = tmp_path / f"{name}.gguf"
        p.write_bytes(data)
        with pytest.raises(FormatError, match=msg):
            GGUFFile(p)


def test_duplicate_tensor_names(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="duplicate tensor name 'a.weight'"):
        GGUFFile(small_gguf(tmp_path / "d.gguf", names=("a.weight", "a.weight")))


def test_data_out_of_bounds(tmp_path: Path) -> None:
    raw = bytearray(small_gguf(tmp_path / "t.gguf").read_bytes())
    # second tensor's offset field: find b.weight's info and push its offset far away
    i = raw.index(b"b.weight") + len(b"b.weight") + 4 + 16 + 4
    raw[i:i + 8] = struct.pack("<Q", 1 << 20)
    p = tmp_path / "oob.gguf"
    p.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="'b.weight' data .* beyond the end"):
        GGUFFile(p)


def test_directory_and_missing(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="is a directory"):
        GGUFFile(tmp_path)
    with pytest.raises(FormatError, match="no such file"):
        GGUFFile(tmp_path / "nope.gguf")


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return small_gguf(tmp_path_factory.mktemp("fuzz") / "s.gguf").read_bytes()


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True, database=None)  # the same examples on every run and machine
@given(data=st.data())
def test_fuzz_mutated_headers(seed_file: bytes, tmp_path: Path, data: st.DataObject) -> None:
    raw = bytearray(seed_file)
    header_len = 400
    for _ in range(data.draw(st.integers(1, 8))):
        kind = data.draw(st.sampled_from(["flip", "byte", "u64", "cut"]))
        pos = data.draw(st.integers(0, min(header_len, len(raw)) - 1))
        if kind == "flip":
            raw[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "byte":
            raw[pos] = data.draw(st.integers(0, 255))
        elif kind == "u64" and pos + 8 <= len(raw):
            raw[pos:pos + 8] = struct.pack("<Q", data.draw(st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1])))
        elif kind == "cut":
            del raw[pos:]
            break
    p = tmp_path / "m.gguf"
    p.write_bytes(bytes(raw))
    try:
        GGUFFile(p)
    except FormatError:
        pass
