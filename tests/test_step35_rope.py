"""Step-3.5 with Llama 3 RoPE scaling: the converter generates ``rope_freqs.weight`` (llama.cpp reads it on the full
attention layers, the MTP heads included). Every layout converts and loads, the values equal a plain re-computation
of the published rule, llama.cpp's logits change with it (trunk and head), the head sees the same factors in every
pairing, and chained speculative decoding stays lossless."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert, inspect_file, surgery
from gguf_mtp.checkpoint.folder import Checkpoint
from gguf_mtp.errors import CompatibilityError, FormatError, UnsupportedError
from gguf_mtp.families.step35 import FULL, Step35
from gguf_mtp.ggufio.reader import GGUFFile
from gguf_mtp.layout import Layout
from gguf_mtp.runtime import MTPSession
from gguf_mtp.runtime.llama import Batch, Context, Model
from tests import helpers
from tests.lossless import Reference
from tests.synthetic import SyntheticSpec

from .mtp_smoke import assert_head_drafts
from .test_surgery import same_model

S = SyntheticSpec("step35", llama3_rope=True)
L, NX, D = S.layers, S.mtp_heads, S.head_dim
PROMPT = "The quick brown fox jumps over the lazy dog. " * 3
LAYOUTS = ("bundled", "trunk-only", "mtp-only", "head-only")


def expected_factors(cfg: dict) -> list[float]:
    """The Llama 3 rule written out per frequency, for the full layers' rotary dims (head_dim / 2, base = the full
    layers' theta), padded with 1.0 to n_rot_max / 2 = head_dim / 2 (the trunk has sliding-window layers)."""
    r = cfg["rope_scaling"]
    base, dim = cfg["rope_theta"][0], cfg["head_dim"] // 2
    orig, lo, hi, factor = (r["original_max_position_embeddings"], r["low_freq_factor"], r["high_freq_factor"],
                            r["factor"])
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / base ** (i / dim)
        wavelen = 2 * math.pi / freq
        if wavelen < orig / hi:
            new = freq
        elif wavelen > orig / lo:
            new = freq / factor
        else:
            smooth = (orig / wavelen - lo) / (hi - lo)
            new = (1 - smooth) * freq / factor + smooth * freq
        out.append(freq / new)
    return out + [1.0] * (cfg["head_dim"] // 2 - len(out))


def rope_freqs(path: Path) -> np.ndarray | None:
    f = GGUFFile(path)
    if "rope_freqs.weight" not in f.tensors:
        return None
    return np.frombuffer(f.read_tensor_bytes("rope_freqs.weight"), dtype=np.float32)


def trunk_logits(path: Path) -> np.ndarray:
    with Model(path) as m, Context(m) as ctx:
        helpers.decode(ctx, m.tokenize(PROMPT), 0)
        return helpers.logits(ctx, -1)


def head_logits(trunk: Path, draft: Path, head: int) -> np.ndarray:
    """Logits of MTP head ``head`` (``draft``'s) on the prompt, fed ``trunk``'s hidden rows."""
    with Model(trunk, load_mtp=True) as m, Context(m, embeddings_nextn=True) as t:
        toks = m.tokenize(PROMPT)
        helpers.decode(t, toks, 0)
        rows = t.h_rows(len(toks)).copy()
    with Model(draft, load_mtp=True) as dm, Context(dm, mtp=True) as d:
        b = Batch(len(toks), dm.n_embd_out)
        b.fill(toks[1:], 1, last_logits=True, embd=rows[:-1])  # token p+1 with the row of position p
        d.set_head(head)
        d.decode_batch(b)
        return helpers.logits(d, -1)


def test_rope_freqs_values(converted, checkpoint) -> None:
    cfg = json.loads((checkpoint("step35", llama3_rope=True) / "config.json").read_text())
    want = np.array(expected_factors(cfg), dtype=np.float32)
    assert want.size == D // 2 and want[0] == 1.0 and want[-1] == 1.0
    assert 1.0 < want[1] < want[2] < 8.0 and want[D // 4 - 1] == 8.0  # each regime of the rule occurs
    for layout in LAYOUTS:
        got = rope_freqs(converted("step35", layout, llama3_rope=True))
        if layout == "head-only":
            assert got is None  # borrowed from the target, like the embeddings
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=layout)
    assert rope_freqs(converted("step35", "bundled")) is None  # no scaling, no tensor


def test_length_follows_the_trunk_rotary_dims(checkpoint) -> None:
    """llama.cpp sizes rope_freqs as n_rot_max / 2 over the trunk layers: head_dim / 4 when all are full attention."""
    fam = Step35(Checkpoint.open(checkpoint("step35", llama3_rope=True)))
    assert fam.rope_freqs().shape == (D // 2,)  # type: ignore[union-attr]
    fam.types = [FULL] * (L + NX)
    ref = fam.rope_freqs()
    assert ref is not None and ref.shape == (D // 4,) and ref.read_f32()[-1] == 8.0


def test_layouts_convert_and_load(converted) -> None:
    paths = {lay: converted("step35", lay, llama3_rope=True) for lay in LAYOUTS}
    for lay, p in paths.items():
        assert inspect_file(p).layout == Layout(lay)
    with Model(paths["bundled"], load_mtp=True) as m, Context(m) as ctx:
        ref = helpers.greedy(ctx, m.tokenize(PROMPT), 12)
    with Model(paths["trunk-only"]) as m, Context(m) as ctx:
        assert helpers.greedy(ctx, m.tokenize(PROMPT), 12) == ref
    for lay in ("bundled", "mtp-only"):
        with Model(paths[lay], load_mtp=True) as m, Context(m, mtp=True) as ctx:
            assert m.n_nextn == NX
            assert_head_drafts(m, ctx)
    plan = surgery.plan_graft(paths["head-only"], paths["trunk-only"])  # what the runtime serves for head-only
    assert "rope_freqs.weight" in {t.name for g in plan.groups for t in g}


def test_scaling_changes_llama_cpp_logits(converted) -> None:
    """Same weights (same seed), config with and without llama3 scaling: llama.cpp's trunk logits differ, and so do
    the full-attention heads' given the same hidden rows, so rope_freqs is really applied (by the heads too)."""
    scaled, plain = converted("step35", "bundled", llama3_rope=True), converted("step35", "bundled")
    fs, fp = GGUFFile(scaled), GGUFFile(plain)
    assert fs.read_tensor_bytes("blk.4.attn_q.weight") == fp.read_tensor_bytes("blk.4.attn_q.weight")
    a, b = trunk_logits(scaled), trunk_logits(plain)
    assert np.isfinite(a).all() and np.abs(a - b).max() > 1e-3
    for head in range(NX):  # heads 0 and 2 are full attention; head 1 is sliding-window, which takes no factors
        diff = np.abs(head_logits(scaled, scaled, head) - head_logits(scaled, plain, head)).max()
        assert diff > 1e-3 if head != 1 else diff == 0, (head, diff)


def test_head_sees_the_factors_in_every_pairing(converted, tmp_path: Path) -> None:
    """A self-contained sidecar carries rope_freqs and a head-only one gets the trunk's when merged: each head
    computes the same logits as in the bundled file."""
    kw = {"llama3_rope": True}
    bundled, trunk = converted("step35", "bundled", **kw), converted("step35", "trunk-only", **kw)
    merged = surgery.graft(converted("step35", "head-only", **kw), trunk, tmp_path / "m.gguf", progress=False).paths[0]
    for head in range(NX):
        ref = head_logits(bundled, bundled, head)
        np.testing.assert_array_equal(head_logits(trunk, converted("step35", "mtp-only", **kw), head), ref)
        np.testing.assert_array_equal(head_logits(merged, merged, head), ref)


def test_chained_heads_are_lossless(converted) -> None:
    kw = {"llama3_rope": True, "oracle_head": True, "trunk_scale": 0.5}
    bundled, trunk = converted("step35", "bundled", **kw), converted("step35", "trunk-only", **kw)
    ref = Reference(lambda: MTPSession(bundled, mtp=False, n_ctx=512), lambda s: s.generate(PROMPT, max_tokens=32))
    for model, mtp in ((bundled, "auto"), (trunk, converted("step35", "mtp-only", **kw)),
                       (trunk, converted("step35", "head-only", **kw))):
        for k in (1, 3):
            with MTPSession(model, mtp=mtp, n_ctx=512, n_draft=k) as s:
                assert s.engine.chain and s.engine.n_heads == NX
                g = s.generate(PROMPT, max_tokens=32)
            ref.check(g, f"step35 llama3 rope {model.name} mtp={getattr(mtp, 'name', mtp)} k={k}")
            assert g.stats.drafted > 0 and g.stats.accepted > 0


def test_surgery_keeps_and_checks_the_factors(converted, tmp_path: Path) -> None:
    kw = {"llama3_rope": True}
    bundled = converted("step35", "bundled", **kw)
    side = surgery.extract(bundled, tmp_path / "side.gguf", progress=False).paths[0]
    same_model(converted("step35", "mtp-only", **kw), side)  # the self-contained sidecar keeps rope_freqs
    trunk = surgery.strip(bundled, tmp_path / "trunk.gguf", progress=False).paths[0]
    same_model(converted("step35", "trunk-only", **kw), trunk)
    # a self-contained head without scaling does not fit a scaled trunk, nor the other way round
    with pytest.raises(CompatibilityError, match="rope_freqs"):
        surgery.graft(converted("step35", "mtp-only"), trunk, tmp_path / "x.gguf", progress=False)
    with pytest.raises(CompatibilityError, match="rope_freqs"):
        surgery.graft(side, converted("step35", "trunk-only"), tmp_path / "y.gguf", progress=False)
    # a head-only sidecar records that it borrows rope_freqs, so the same checks apply to it
    head = converted("step35", "head-only", **kw)
    assert "rope_freqs.weight" in GGUFFile(head).kv["step35.nextn_shared_target_tensors"].value
    extracted = surgery.extract(bundled, tmp_path / "head.gguf", head_only=True, progress=False).paths[0]
    assert "rope_freqs.weight" in GGUFFile(extracted).kv["step35.nextn_shared_target_tensors"].value
    surgery.graft(head, trunk, tmp_path / "ok.gguf", progress=False)
    with pytest.raises(CompatibilityError, match="rope_freqs.weight absent \\(target\\) vs borrowed"):
        surgery.graft(head, converted("step35", "trunk-only"), tmp_path / "z.gguf", progress=False)
    with pytest.raises(CompatibilityError, match="rope_freqs.weight present \\(target\\) vs not used"):
        surgery.graft(converted("step35", "head-only"), trunk, tmp_path / "w.gguf", progress=False)


def _variant(src: Path, dst: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_config_forms_and_refusals(checkpoint, converted, tmp_path: Path) -> None:
    src = checkpoint("step35", llama3_rope=True)
    want = rope_freqs(converted("step35", "bundled", llama3_rope=True))

    def per_type(cfg: dict) -> None:  # transformers' newer form: rope_parameters per attention type
        cfg["rope_parameters"] = {FULL: {**cfg.pop("rope_scaling"), "rope_theta": 5e6},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}

    r = convert(_variant(src, tmp_path / "pt", per_type), outfile=tmp_path / "pt.gguf", progress=False)
    np.testing.assert_array_equal(rope_freqs(r.path), want)
    bad = {
        "yarn": (UnsupportedError, lambda c: c["rope_scaling"].update(rope_type="yarn")),
        "nokey": (FormatError, lambda c: c["rope_scaling"].pop("low_freq_factor")),
        "swa": (UnsupportedError, lambda c: c.update(rope_parameters={
            FULL: c.pop("rope_scaling"), "sliding_attention": {"rope_type": "llama3"}})),
    }
    for name, (err, edit) in bad.items():
        with pytest.raises(err, match="rope|llama3"):
            convert(_variant(src, tmp_path / name, edit), outfile=tmp_path / f"{name}.gguf", progress=False)
