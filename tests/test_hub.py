"""Straight from the Hub, against a local stand-in served through HF_ENDPOINT: conversion from a repo id,
a head-only sidecar and a graft that transfer only the head's byte ranges (plus headers), resuming after an
interruption, and clear errors with no partial output on server errors and short ranges."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_mtp import convert, surgery
from gguf_mtp.checkpoint.folder import Checkpoint
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.ggufio.model import GGUFModel
from tests.synthetic import SyntheticSpec, write_checkpoint
from gguf_mtp_cli.main import main

from .hub_server import HubStandIn

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

REPO = "org/tiny-qwen35"


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch):
    ck = write_checkpoint(tmp_path / "repo", SyntheticSpec("qwen35", vocab_size=512, n_shards=3))
    with HubStandIn() as h:
        h.add(REPO, ck)
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.setenv("GGUF_MTP_CACHE", str(tmp_path / "gm-cache"))
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        import huggingface_hub.constants as c

        monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.chdir(tmp_path)
        h.local = ck  # type: ignore[attr-defined]
        yield h


def same_tensors(a: Path, b: Path) -> None:
    ma, mb = GGUFModel(a), GGUFModel(b)
    assert set(ma.tensors) == set(mb.tensors)
    for n, t in ma.tensors.items():
        assert t.file.read_tensor_bytes(n) == mb.tensors[n].file.read_tensor_bytes(n), n


def head_bytes(folder: Path, with_embeddings: bool) -> dict[str, int]:
    """Bytes of the tensors a sidecar needs, per shard (what must cross the wire besides headers)."""
    ck = Checkpoint.open(folder)
    wanted = [n for n in ck.tensors if n.startswith("mtp.")]
    if with_embeddings:
        wanted += ["model.language_model.embed_tokens.weight", "model.language_model.norm.weight", "lm_head.weight"]
    out: dict[str, int] = {}
    for n in wanted:
        t = ck.tensor(n)
        out[t.path.name] = out.get(t.path.name, 0) + t.nbytes
    return out


def header_bytes(folder: Path) -> dict[str, int]:
    import struct

    out = {}
    for p in folder.glob("*.safetensors"):
        (n,) = struct.unpack("<Q", p.read_bytes()[:8])
        out[p.name] = 8 + n
    return out


def test_convert_from_a_repo_id(hub, tmp_path: Path) -> None:
    r = convert(REPO, outfile=tmp_path / "hub.gguf", outtype="q8_0", progress=False)
    local = convert(hub.local, outfile=tmp_path / "local.gguf", outtype="q8_0", progress=False)
    same_tensors(r.path, local.path)
    assert sum(hub.served[f] for f in hub.served if f.endswith(".safetensors")) == sum(
        p.stat().st_size for p in hub.local.glob("*.safetensors"))


@pytest.mark.parametrize("head_only", [True, False])
def test_sidecar_fetches_only_the_heads_bytes(hub, tmp_path: Path, head_only: bool) -> None:
    layout = "head-only" if head_only else "mtp-only"
    r = convert(REPO, outfile=tmp_path / "side.gguf", outtype="q8_0", layout=layout, progress=False)
    local = convert(hub.local, outfile=tmp_path / "local.gguf", outtype="q8_0", layout=layout, progress=False)
    same_tensors(r.path, local.path)
    need, heads = head_bytes(hub.local, not head_only), header_bytes(hub.local)
    for shard, size in ((p.name, p.stat().st_size) for p in hub.local.glob("*.safetensors")):
        assert hub.served[shard] <= heads[shard] + need.get(shard, 0) + (1 << 20)  # ranges merge across gaps
        assert hub.served[shard] >= heads[shard] + need.get(shard, 0)
    total = sum(p.stat().st_size for p in hub.local.glob("*.safetensors"))
    served = sum(hub.served[p.name] for p in hub.local.glob("*.safetensors"))
    if head_only:
        assert served < total / 2
    assert any("range requests" in n for n in r.notes)


def test_graft_from_a_repo_id(hub, tmp_path: Path, capsys) -> None:
    trunk = convert(hub.local, outfile=tmp_path / "trunk.gguf", outtype="q8_0", layout="trunk-only", progress=False)
    bundled = convert(hub.local, outfile=tmp_path / "bundled.gguf", outtype="q8_0", progress=False)
    assert main(["extract", REPO, "--onto", str(trunk.path), "-o", str(tmp_path / "g.gguf"), "-q"]) == 0
    same_tensors(tmp_path / "g.gguf", bundled.path)
    assert not list(tmp_path.glob(".head-*"))


def test_graft_from_hub_is_one_library_call(hub, tmp_path: Path) -> None:
    trunk = convert(hub.local, outfile=tmp_path / "trunk.gguf", outtype="q8_0", layout="trunk-only", progress=False)
    bundled = convert(hub.local, outfile=tmp_path / "bundled.gguf", outtype="q8_0", progress=False)
    heard: list[str] = []
    r = surgery.graft_from_hub(REPO, trunk.path, tmp_path / "g.gguf", progress=False, on_note=heard.append)
    assert r.op == "graft" and r.paths == [tmp_path / "g.gguf"]
    same_tensors(r.paths[0], bundled.path)
    assert r.notes == heard and any("range requests" in n for n in heard)
    assert not list(tmp_path.glob(".head-*"))


def test_interrupted_fetch_resumes(hub, tmp_path: Path) -> None:
    hub.fail_after_ranges = 3  # three ranges succeed, then the Hub fails
    with pytest.raises(GgufMtpError, match="run again to resume"):
        convert(REPO, outfile=tmp_path / "s.gguf", layout="head-only", progress=False)
    assert not (tmp_path / "s.gguf").exists() and not list(tmp_path.glob("*.partial"))
    first = list(hub.ranges_ok)
    assert len(first) == 3
    hub.fail_after_ranges = None
    convert(REPO, outfile=tmp_path / "s.gguf", layout="head-only", progress=False)
    second = hub.ranges_ok[len(first):]
    for name, a, b in second:  # nothing fetched in the first run is fetched again
        assert not any(n == name and a < e and s < b for n, s, e in first), (name, a, b)
    local = convert(hub.local, outfile=tmp_path / "local.gguf", layout="head-only", progress=False)
    same_tensors(tmp_path / "s.gguf", local.path)


def test_server_errors_and_short_ranges(hub, tmp_path: Path) -> None:
    hub.truncate.add("model-00003-of-00003.safetensors")
    with pytest.raises(GgufMtpError, match=r"\(\d+ bytes instead of \d+\)"):
        convert(REPO, outfile=tmp_path / "s.gguf", layout="head-only", progress=False)
    assert not (tmp_path / "s.gguf").exists() and not list(tmp_path.glob("*.partial"))
    hub.truncate.clear()
    with pytest.raises(GgufMtpError, match="no such repository"):
        convert("org/missing", outfile=tmp_path / "s.gguf", layout="head-only", progress=False)


def test_partial_checkpoint_is_not_converted_whole(hub, tmp_path: Path) -> None:
    convert(REPO, outfile=tmp_path / "s.gguf", layout="head-only", progress=False)
    partial = next((tmp_path / "gm-cache").rglob(".gguf-mtp-ranges.json")).parent
    with pytest.raises(GgufMtpError, match="partial checkpoint"):
        convert(partial, outfile=tmp_path / "x.gguf", progress=False)


def test_fp8_head_from_the_hub(tmp_path: Path, monkeypatch) -> None:
    """FP8 repos: the head's block scales are fetched with the head."""
    ck = write_checkpoint(tmp_path / "fp8", SyntheticSpec("qwen35", fp8=True, n_shards=2))
    with HubStandIn() as h:
        h.add("org/fp8", ck)
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.setenv("GGUF_MTP_CACHE", str(tmp_path / "gm-cache"))
        import huggingface_hub.constants as c

        monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        r = convert("org/fp8", outfile=tmp_path / "hub.gguf", layout="head-only", progress=False)
        local = convert(ck, outfile=tmp_path / "local.gguf", layout="head-only", progress=False)
        same_tensors(r.path, local.path)


def test_draft_head_from_a_repo_id(hub, tmp_path: Path) -> None:
    """A head-only sidecar with a draft LM head needs the LM head's bytes too (fetched, not written); a graft from
    the Hub makes the draft head from TARGET's LM head (the fetched head-only sidecar has none)."""
    r = convert(REPO, outfile=tmp_path / "side.gguf", layout="head-only", draft_head_type="q4_0", progress=False)
    local = convert(hub.local, outfile=tmp_path / "local.gguf", layout="head-only", draft_head_type="q4_0",
                    progress=False)
    same_tensors(r.path, local.path)
    assert "blk.4.nextn.shared_head_head.weight" in GGUFModel(r.path).tensors
    assert "output.weight" not in GGUFModel(r.path).tensors
    trunk = convert(hub.local, outfile=tmp_path / "trunk.gguf", outtype="q8_0", layout="trunk-only", progress=False)
    g = surgery.graft_from_hub(REPO, trunk.path, tmp_path / "g.gguf", draft_head_type="q5_0", progress=False)
    assert GGUFModel(g.paths[0]).tensors["blk.4.nextn.shared_head_head.weight"].info.type_name == "Q5_0"
