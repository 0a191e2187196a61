"""`gguf-mtp quantize`: llama.cpp K-quants with the head kept at Q8_0, layouts preserved, an importance
matrix without head entries, and the runtime still lossless on the result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType

from gguf_mtp.errors import GgufMtpError, UnsupportedError
from gguf_mtp.ggufio.format import KV
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.ggufio.writer import OutTensor, write_all, write_gguf
from gguf_mtp.imatrix import load_imatrix
from gguf_mtp.layout import Layout
from gguf_mtp.quantize import quantize_model
from gguf_mtp.runtime import MTPSession

WIDE = {"hidden": 256, "intermediate": 512, "oracle_head": True, "trunk_scale": 0.5}  # rows fit K-quant blocks
K_SCHEME = {"Q4_K_M": {"Q4_K", "Q5_K", "Q6_K"}, "Q5_K_S": {"Q5_K", "Q6_K"}}


FALLBACK = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}  # llama.cpp's types for rows that are not 256-wide


def trunk_matrices(path: Path) -> dict[str, tuple[str, int]]:
    m = GGUFModel(path)
    n_trunk = int(m.arch_get("{arch}.block_count")) - int(m.arch_get("{arch}.nextn_predict_layers", 0) or 0)
    return {n: (t.info.type_name, t.info.shape[0]) for n, t in m.tensors.items()
            if n.startswith("blk.") and int(n.split(".")[1]) < n_trunk and len(t.info.shape) > 1
            and not n.endswith(("ssm_conv1d.weight", "ffn_gate_inp.weight"))}


@pytest.mark.parametrize("qtype", ["Q4_K_M", "Q5_K_S"])
def test_k_quant_keeps_the_head_at_q8_0(converted, tmp_path: Path, qtype: str) -> None:
    src = converted("qwen35", "bundled", "bf16", mtp_type="bf16", **WIDE)
    r = quantize_model(src, tmp_path / f"m-{qtype}.gguf", qtype)
    assert r.report.layout == Layout.BUNDLED and r.report.file_type == qtype
    assert {t.type for t in r.report.mtp_tensors if len(t.shape) > 1} == {"Q8_0"}
    assert {t.type for t in r.report.mtp_tensors if len(t.shape) == 1} == {"F32"}
    types = trunk_matrices(r.path)
    assert {t for t, ne0 in types.values() if ne0 % 256 == 0} <= K_SCHEME[qtype]
    assert {t for t, ne0 in types.values() if ne0 % 256} <= FALLBACK
    with MTPSession(r.path, mtp=False, n_ctx=512) as plain:
        ref = plain.generate("The quick brown fox jumps", max_tokens=32).tokens
    with MTPSession(r.path, n_ctx=512, n_draft=3) as s:
        g = s.generate("The quick brown fox jumps", max_tokens=32)
        assert g.tokens == ref and g.stats.accepted > 0


def test_sidecar_is_quantized_on_its_own(converted, tmp_path: Path) -> None:
    src = converted("qwen35", "mtp-only", "bf16", mtp_type="bf16", **WIDE)
    r = quantize_model(src, tmp_path / "s.gguf", "Q4_K_M")
    assert r.report.layout == Layout.MTP_ONLY
    assert {t.type for t in r.report.mtp_tensors if len(t.shape) > 1} == {"Q8_0"}
    src = converted("qwen35", "head-only", "bf16", mtp_type="bf16", **WIDE)
    assert quantize_model(src, tmp_path / "h.gguf", "Q4_K_M").report.layout == Layout.HEAD_ONLY


def write_imatrix(path: Path, model: Path, skip_head: bool = True) -> None:
    """An imatrix like llama-imatrix writes (GGUF: <name>.in_sum2 and <name>.counts), without the head."""
    m = GGUFModel(model)
    n_trunk = int(m.arch_get("{arch}.block_count")) - int(m.arch_get("{arch}.nextn_predict_layers", 0) or 0)
    rng = np.random.default_rng(0)
    tensors = []
    for name, t in m.tensors.items():
        if len(t.info.shape) < 2 or not name.startswith("blk."):
            continue
        if skip_head and int(name.split(".")[1]) >= n_trunk:
            continue
        ne0, n_mat = t.info.shape[0], (t.info.shape[2] if len(t.info.shape) > 2 else 1)
        sums = (rng.random(ne0 * n_mat) * 10 + 1).astype(np.float32)
        counts = np.full(n_mat, 5, np.float32)
        for suffix, arr, shape in ((".in_sum2", sums, (ne0, n_mat)), (".counts", counts, (1, n_mat))):
            tensors.append(OutTensor(name + suffix, shape, 0, lambda fh, p, a=arr: write_all(fh, a.tobytes())))
    kvs = [KV.string("general.type", "imatrix"), KV.array("imatrix.datasets", GGUFValueType.STRING, ["test"]),
           KV.u32("imatrix.chunk_count", 5), KV.u32("imatrix.chunk_size", 512)]
    write_gguf(path, kvs, tensors)


def test_imatrix_without_head_entries(converted, tmp_path: Path) -> None:
    src = converted("qwen35", "bundled", "bf16", mtp_type="bf16", **WIDE)
    im = tmp_path / "imatrix.gguf"
    write_imatrix(im, src)
    data = load_imatrix(im)
    assert data and all(np.allclose(v, v) and (v > 0).all() for v in data.values())
    r = quantize_model(src, tmp_path / "m.gguf", "IQ4_XS", imatrix=im)
    assert any("no entries for the MTP head" in n for n in r.notes)
    assert {t.type for t in r.report.mtp_tensors if len(t.shape) > 1} == {"Q8_0"}
    with pytest.raises(GgufMtpError, match="needs an importance matrix"):
        quantize_model(src, tmp_path / "x.gguf", "IQ2_XXS")
    with pytest.raises(GgufMtpError, match="no importance data for the MTP head"):
        quantize_model(src, tmp_path / "y.gguf", "IQ2_XXS", imatrix=im, mtp_type="iq2_xxs")


def test_bad_arguments(converted, tmp_path: Path) -> None:
    src = converted("qwen35", "bundled", "bf16", mtp_type="bf16", **WIDE)
    with pytest.raises(UnsupportedError, match="unknown quantization type 'Q3_Z'"):
        quantize_model(src, tmp_path / "a.gguf", "Q3_Z")
    with pytest.raises(UnsupportedError, match="--mtp-type 'q9' is not a ggml type"):
        quantize_model(src, tmp_path / "a.gguf", "Q4_K_M", mtp_type="q9")
    (tmp_path / "b.gguf").write_bytes(b"x")
    with pytest.raises(GgufMtpError, match="--force"):
        quantize_model(src, tmp_path / "b.gguf", "Q4_K_M")
    assert not list(tmp_path.glob("*.partial"))
