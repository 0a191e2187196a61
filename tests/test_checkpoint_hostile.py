"""Hostile local checkpoints: index shard names that leave the folder, symlinks out of it, and safetensors
headers the safetensors library refuses. Property of every case: one :class:`GgufMtpError` with a one-line
message naming the file (and key), no output, the checkpoint's bytes unchanged, nothing read from outside."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert
from gguf_mtp.checkpoint.folder import Checkpoint
from gguf_mtp.checkpoint.shards import read_header
from gguf_mtp.errors import FormatError, GgufMtpError
from gguf_mtp.paths import component, confined, relative_name
from tests.synthetic.safetensors_writer import write_safetensors

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

INDEX = "model.safetensors.index.json"
SHARD = "model-00002-of-00002.safetensors"
SECRET = b"s3cr3t:x:0:0:s3cr3t:/s3cr3t:/bin/bash\n"  # like the start of /etc/passwd


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links as their target) -> sha256, to compare before and after."""
    out = {}
    for p in sorted(folder.rglob("*")):
        key = p.relative_to(folder).as_posix()
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        elif p.is_file():
            out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture()
def ck(checkpoint, tmp_path: Path) -> Path:
    dst = tmp_path / "ck"
    shutil.copytree(checkpoint("qwen35"), dst)
    return dst


def refused(tmp_path: Path, ck: Path, *needles: str) -> str:
    """Convert ``ck`` and return the message of the one-line error it must end in."""
    before = tree(tmp_path)
    with pytest.raises(GgufMtpError) as e:
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 600, msg
    for n in needles:
        assert n in msg, msg
    assert tree(tmp_path) == before  # no output, no temp file, inputs unchanged
    return msg


def set_shard(ck: Path, tensor: str, shard: object) -> None:
    idx = json.loads((ck / INDEX).read_text())
    idx["weight_map"][tensor] = shard
    (ck / INDEX).write_text(json.dumps(idx))


def first_tensor_of(ck: Path, shard: str) -> str:
    idx = json.loads((ck / INDEX).read_text())
    return next(t for t, s in idx["weight_map"].items() if s == shard)


# -- names from the index ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,why", [
    ("../outside/" + SHARD, "'..' component"),
    ("{abs}", "absolute path"),
    ("..\\outside\\" + SHARD, "backslash"),
    ("x\x00.safetensors", "control character"),
    ("sub//x.safetensors", "empty or '.' component"),
    ("C:x.safetensors", "drive prefix"),
    (7, "not a string"),
    ("config.json", "not a .safetensors file"),
])
def test_index_names_outside_the_folder_are_refused(ck: Path, tmp_path: Path, name: object, why: str) -> None:
    outside = tmp_path / "outside"  # a valid shard outside the checkpoint: it must not be read
    outside.mkdir()
    shutil.copy(ck / SHARD, outside / SHARD)
    if name == "{abs}":
        name = str(outside / SHARD)
    tensor = first_tensor_of(ck, SHARD)
    set_shard(ck, tensor, name)
    refused(tmp_path, ck, INDEX, f"weight_map[{tensor!r}]", why)


def test_index_naming_a_non_safetensors_file_leaks_none_of_its_bytes(ck: Path, tmp_path: Path) -> None:
    (ck / "passwd.safetensors").write_bytes(SECRET)  # a file inside the folder, but not safetensors
    set_shard(ck, first_tensor_of(ck, SHARD), "passwd.safetensors")
    msg = refused(tmp_path, ck, "passwd.safetensors", "not a safetensors file")
    assert "s3cr3t" not in msg and str(struct.unpack("<Q", SECRET[:8])[0]) not in msg


def test_symlinked_shard_pointing_outside_is_refused(ck: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    shutil.move(ck / SHARD, tmp_path / "elsewhere" / SHARD)
    (ck / SHARD).symlink_to(tmp_path / "elsewhere" / SHARD)
    refused(tmp_path, ck, SHARD, "outside", "copy the file into the folder")


def test_symlinked_shard_without_index_pointing_outside_is_refused(ck: Path, tmp_path: Path) -> None:
    (ck / INDEX).unlink()
    (tmp_path / "secret").write_bytes(SECRET * 4)
    (ck / "zz.safetensors").symlink_to(tmp_path / "secret")
    msg = refused(tmp_path, ck, "zz.safetensors", "outside")
    assert "s3cr3t" not in msg


def test_symlinked_config_pointing_outside_is_refused(ck: Path, tmp_path: Path) -> None:
    shutil.move(ck / "config.json", tmp_path / "config.json")
    (ck / "config.json").symlink_to(tmp_path / "config.json")
    refused(tmp_path, ck, "config.json", "outside")


def test_links_inside_the_folder_and_into_an_hf_cache_blobs_folder_are_fine(ck: Path, tmp_path: Path) -> None:
    """The Hugging Face cache layout: snapshots/<commit>/<file> -> ../../blobs/<hash>."""
    repo = tmp_path / "models--org--m"
    snap = repo / "snapshots" / ("a" * 40)
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for p in ck.iterdir():
        blob = repo / "blobs" / hashlib.sha256(p.name.encode()).hexdigest()
        shutil.copy(p, blob)
        (snap / p.name).symlink_to(Path("../../blobs") / blob.name)
    os.rename(snap / SHARD, snap / "real.safetensors")
    (snap / SHARD).symlink_to("real.safetensors")  # a link inside the folder
    ref = Checkpoint.open(ck)
    got = Checkpoint.open(snap)
    assert set(got.tensors) == set(ref.tensors)
    name = first_tensor_of(ck, SHARD)
    assert np.array_equal(got.tensor(name).read_raw(), ref.tensor(name).read_raw())


def test_the_same_tensor_in_two_shards_without_an_index_is_refused(ck: Path, tmp_path: Path) -> None:
    (ck / INDEX).unlink()
    shutil.copy(ck / SHARD, ck / "model-00003-of-00002.safetensors")
    refused(tmp_path, ck, "is in both", SHARD, "model-00003-of-00002.safetensors")


def test_a_fifo_shard_is_refused_without_blocking(ck: Path, tmp_path: Path) -> None:
    (ck / SHARD).unlink()
    os.mkfifo(ck / SHARD)
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("opening a FIFO shard blocked"))
    signal.alarm(20)
    try:
        with pytest.raises(GgufMtpError, match="not a regular file"):
            read_header(ck / SHARD)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- safetensors headers ------------------------------------------------------------------------------------------

def header_file(path: Path, header: object, data: bytes, raw: bytes | None = None) -> Path:
    body = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)
    return path


F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


def two(a: list[int], b: list[int]) -> dict[str, object]:
    return {"a": {"dtype": "F32", "shape": [(a[1] - a[0]) // 4], "data_offsets": a},
            "b": {"dtype": "F32", "shape": [(b[1] - b[0]) // 4], "data_offsets": b}}


@pytest.mark.parametrize("header,data,needle", [
    (two([0, 8], [4, 12]), bytes(12), "overlap"),
    (two([0, 8], [0, 8]), bytes(8), "overlap"),
    (two([0, 8], [12, 20]), bytes(20), "belong to no tensor"),
    ({"a": F32}, bytes(9), "1 bytes after its last tensor"),
    ({"a": F32}, bytes(7), "truncated"),
    ({"a": {**F32, "shape": ["2"]}}, bytes(8), "malformed header entry"),
    ({"a": {**F32, "shape": None}}, bytes(8), "malformed header entry"),
    ({"a": {**F32, "shape": [True, 2]}}, bytes(8), "malformed header entry"),
    ({"a": {**F32, "shape": [-2]}}, bytes(8), "malformed header entry"),
    ({"a": {**F32, "data_offsets": [0, 8, 9]}}, bytes(8), "malformed header entry"),
    ({"a": {**F32, "data_offsets": [8, 0]}}, bytes(8), "does not match shape"),
    ({"a": {**F32, "dtype": ["F32"]}}, bytes(8), "malformed header entry"),
    ({"a": {**F32, "shape": [3]}}, bytes(8), "does not match shape"),
    ({"a": F32, "__metadata__": [1]}, bytes(8), "__metadata__"),
    (None, bytes(8), "must be an object"),
])
def test_safetensors_headers_the_library_refuses(tmp_path: Path, header: object, data: bytes, needle: str) -> None:
    raw = b"[1, 2]" if header is None else None
    p = header_file(tmp_path / "x.safetensors", header, data, raw)
    with pytest.raises(GgufMtpError, match=needle) as e:
        read_header(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_duplicate_tensor_names_in_a_header_are_refused(tmp_path: Path) -> None:
    raw = b'{"a": ' + json.dumps(F32).encode() + b', "a": ' + json.dumps(F32).encode() + b"}"
    with pytest.raises(FormatError, match="appears twice"):
        read_header(header_file(tmp_path / "x.safetensors", None, bytes(8), raw))


def test_a_header_nested_200000_deep_is_refused(tmp_path: Path) -> None:
    raw = b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with pytest.raises(FormatError, match="nested too deeply|malformed"):
        read_header(header_file(tmp_path / "x.safetensors", None, b"", raw))


@pytest.mark.parametrize("n", [1 << 63, (100 << 20) + 1, 10_000])
def test_absurd_header_lengths_are_refused_before_reading(tmp_path: Path, n: int) -> None:
    p = tmp_path / "x.safetensors"
    p.write_bytes(struct.pack("<Q", n) + b"{}")
    with pytest.raises(FormatError, match="header length field is invalid") as e:
        read_header(p)
    assert str(n) not in str(e.value)


def test_a_file_the_safetensors_library_writes_is_accepted(tmp_path: Path) -> None:
    """The checks are not stricter than the reference implementation (padding, zero-size tensors, metadata)."""
    st = pytest.importorskip("safetensors.numpy")
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "empty": np.zeros((0, 4), np.float16),
              "b": np.ones(3, np.float16)}
    st.save_file(arrays, str(tmp_path / "x.safetensors"), metadata={"format": "pt"})
    refs = read_header(tmp_path / "x.safetensors")
    assert np.array_equal(refs["w"].read_f32().reshape(2, 3), arrays["w"])
    assert refs["empty"].nbytes == 0


def test_our_refusals_match_the_safetensors_library(tmp_path: Path) -> None:
    """Overlap, gaps and trailing bytes: the safetensors library refuses the same files."""
    st = pytest.importorskip("safetensors.numpy")
    cases = [(two([0, 8], [4, 12]), bytes(12)), (two([0, 8], [12, 20]), bytes(20)), ({"a": F32}, bytes(9))]
    for i, (header, data) in enumerate(cases):
        p = header_file(tmp_path / f"{i}.safetensors", header, data)
        with pytest.raises(Exception):
            st.load_file(str(p))
        with pytest.raises(FormatError):
            read_header(p)


def test_synthetic_writer_output_passes(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "s.safetensors", [("t", (3, 4), "F32", lambda: np.ones((3, 4), np.float32))])
    assert read_header(tmp_path / "s.safetensors")["t"].shape == (3, 4)


# -- the helper the other modules use ----------------------------------------------------------------------------

def test_confined_api(tmp_path: Path) -> None:
    assert confined(tmp_path, "a/b.safetensors", "w") == tmp_path / "a" / "b.safetensors"
    assert relative_name("a/b", "w") == "a/b"
    assert component("0" * 40, "commit") == "0" * 40
    bad: list[tuple[Callable[..., object], object]] = [
        (relative_name, "../x"), (relative_name, "/x"), (relative_name, "a/./b"), (relative_name, ""),
        (relative_name, "a\nb"), (relative_name, "x" * 2000), (component, "a/b"), (component, ".."),
    ]
    for fn, name in bad:
        with pytest.raises(FormatError, match="^w ") as e:
            fn(name, "w")
        assert "\n" not in str(e.value)
    (tmp_path / "link").symlink_to("/")
    with pytest.raises(FormatError, match="outside"):
        confined(tmp_path, "link/etc/passwd", "w")
