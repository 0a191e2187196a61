"""`gguf-mtp quantize`: llama.cpp K-quants with the head kept at Q8_0, layouts preserved, an importance
matrix without head entries, and the runtime still lossless on the result."""

from __future__ import annotations

import resource
import signal
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

from .lossless import Reference
from .reliability import can_unshare_mount, sub

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
    action = lambda s: s.generate("The quick brown fox jumps", max_tokens=32)  # noqa: E731
    # K-quants are repacked on some CPUs: a verify's rows and a plain step's one row round apart (tie rule)
    ref = Reference(lambda: MTPSession(r.path, mtp=False, n_ctx=512), action)
    with MTPSession(r.path, n_ctx=512, n_draft=3) as s:
        g = action(s)
        assert g.stats.accepted > 0
    ref.check(g, qtype)


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


#: two files of the same model may pick other tokens only where the reference's top two logits are this close (the
#: synthetic models' logits are of order 1, their median top-two gap about 0.06): F16/BF16/F32 weights go through
#: other ggml kernels, whose rounding can break such a tie either way
TIE = 5e-3
PROMPTS = ["The quick brown fox jumps", "hello world", "1 2 3 4", "def main():"]


def greedy_alike(ref: Path, other: Path, n: int = 32) -> tuple[int, int]:
    """Greedy decoding of ``ref``, with ``other`` fed the same tokens: at every step ``other`` picks ``ref``'s token,
    or one whose logit in ``ref`` is within TIE of the top (a tie). Returns (ties, steps)."""
    from gguf_mtp.runtime import llama

    from .helpers import decode, logits

    ties = steps = 0
    with llama.Model(ref) as ma, llama.Model(other) as mb:
        for prompt in PROMPTS:
            with llama.Context(ma, n_ctx=256) as ca, llama.Context(mb, n_ctx=256) as cb:
                toks = ma.tokenize(prompt)
                decode(ca, toks, 0)
                decode(cb, toks, 0)
                for pos in range(len(toks), len(toks) + n):
                    la, lb = logits(ca), logits(cb)
                    ta, tb = int(np.argmax(la)), int(np.argmax(lb))
                    gap = float(la[ta] - la[tb])
                    assert ta == tb or gap <= TIE, f"{prompt!r} step {pos}: {ta} vs {tb}, gap {gap:.5f} > {TIE}"
                    ties, steps = ties + (ta != tb), steps + 1
                    decode(ca, [ta], pos)
                    decode(cb, [ta], pos)
    return ties, steps


@pytest.mark.parametrize("qtype", ["F16", "BF16", "F32"])
def test_float_targets_keep_a_q8_0_head_and_a_draft_head(converted, tmp_path: Path, qtype: str) -> None:
    """Issue 23: llama.cpp applies no tensor-type override to F32/F16/BF16 and refused the Q8_0 head ("requantizing
    from type q8_0 is disabled"). Now the trunk is converted and the head and the draft head kept byte for byte."""
    from gguf_mtp.surgery import add_draft_head

    base = converted("qwen35", "bundled", "bf16", **WIDE)  # BF16 trunk, Q8_0 head (convert's default)
    src = add_draft_head(base, tmp_path / "src.gguf", "q4_0", progress=False).paths[0]  # + a Q4_0 draft LM head
    r = quantize_model(src, tmp_path / f"m-{qtype}.gguf", qtype, progress=False)
    a, b = GGUFModel(src), GGUFModel(r.path)
    assert r.report.layout == Layout.BUNDLED and r.report.file_type == qtype
    assert a.tensors.keys() == b.tensors.keys()
    head = {n for n in a.tensors if n.startswith("blk.4.")}
    kept = {n for n in head if len(a.tensors[n].info.shape) > 1}
    assert {a.tensors[n].info.type_name for n in kept} == {"Q8_0", "Q4_0"}
    for n in kept:  # the head as it was: type and bytes
        assert b.tensors[n].info.type_name == a.tensors[n].info.type_name
        assert b.tensors[n].file.read_tensor_bytes(n) == a.tensors[n].file.read_tensor_bytes(n), n
    trunk = {t for n, (t, _) in trunk_matrices(r.path).items()}
    assert trunk == {qtype}, trunk
    ties, steps = greedy_alike(src, r.path)
    print(f"{qtype}: {ties} ties in {steps} steps")
    assert ties <= steps // 10  # ties are rare: a file that decodes otherwise fails here too
    with MTPSession(r.path, n_ctx=512, n_draft=3) as s:  # the kept head drafts
        assert s.generate("The quick brown fox jumps", max_tokens=16).stats.accepted > 0


def test_float_targets_refuse_a_quantized_trunk_and_requantizing_the_head(converted, tmp_path: Path) -> None:
    q8 = converted("qwen35", "bundled", "q8_0", **WIDE)
    with pytest.raises(UnsupportedError, match=r"is Q8_0; F16 is made from a float model"):
        quantize_model(q8, tmp_path / "a.gguf", "F16")
    src = converted("qwen35", "bundled", "bf16", **WIDE)
    with pytest.raises(UnsupportedError, match=r"already Q8_0; it cannot be re-encoded as Q4_0 .* --mtp-type q8_0"):
        quantize_model(src, tmp_path / "b.gguf", "Q4_K_M", mtp_type="q4_0")
    r = quantize_model(src, tmp_path / "c.gguf", "F16", mtp_type=None)  # 'same': the head follows the trunk
    assert {t.type for t in r.report.mtp_tensors if len(t.shape) > 1} == {"F16"}
    assert not list(tmp_path.glob(".*partial"))


def _file_size_limit() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process


def test_a_full_disk_is_one_line_naming_the_output(converted, tmp_path: Path) -> None:
    """Issue 23: llama.cpp's quantizer said `basic_ios::clear: iostream error` and the message named the input."""
    src = converted("qwen35", "bundled", "bf16", **WIDE)
    out = tmp_path / "out"
    out.mkdir()
    for qtype in ("Q4_K_M", "F16"):  # F16: the failing write is the first of two passes
        r = sub(["quantize", src, out / "o.gguf", qtype], preexec_fn=_file_size_limit)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith(f"error: {out / 'o.gguf'}: File too large (EFBIG); "), \
            r.stderr
        assert "iostream" not in r.stderr and str(src) not in r.stderr, r.stderr
        assert not list(out.iterdir())


@pytest.mark.skipif(not can_unshare_mount(), reason="cannot mount a private tmpfs here (unshare -rm)")
def test_quantize_onto_a_small_tmpfs(converted, tmp_path: Path) -> None:
    from .test_output_policy import _private_tmpfs

    src = converted("qwen35", "bundled", "bf16", **WIDE)
    disk = tmp_path / "disk"
    disk.mkdir()
    r = _private_tmpfs(disk, "size=512k", ["quantize", src, disk / "o.gguf", "Q4_K_M"])
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"error: {disk / 'o.gguf'}: No space left on device (ENOSPC); free some space or "
                                "write to another disk (--outfile)"), r.stderr
    assert r.stdout.split("LEFT:")[-1].strip() == ""  # nothing left behind
