"""The shipped trained model (examples/tiny-qwen35-mtp): the semantic test of the converter and the runtime.

Its reference numbers were computed in PyTorch at the end of training (examples/train_tiny_mtp). A head
that loads but was converted wrongly (a swapped concat order, a missing +1 on a norm) still runs and never
gets a draft accepted: only a trained head tells. No torch here: the references are shipped files.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gguf_mtp import convert
from gguf_mtp.checkpoint.shards import read_header
from gguf_mtp.quantize import quantize_model
from gguf_mtp.runtime import MTPSession
from gguf_mtp.runtime.llama import Context, Model
from gguf_mtp.surgery import graft
from tests.synthetic.safetensors_writer import write_safetensors
from gguf_mtp_cli.main import app
from tests import helpers
from tests.helpers import whole

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
REF = json.loads((TINY / "reference.json").read_text())
TOL = 0.05  # acceptance within 5 points of PyTorch's
NGL = int(os.environ.get("GGUF_MTP_TEST_NGL", "0"))  # bench/gpu.sh runs these on a GPU too


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tiny")
    out = {}
    for name, kw in {"bundled": {}, "f32": {"outtype": "f32"}, "trunk": {"layout": "trunk-only"},
                     "mtp": {"layout": "mtp-only"}, "head": {"layout": "head-only"}}.items():
        out[name] = convert(TINY, outfile=d / f"tiny-{name}.gguf", progress=False, **kw).path
    for q in ("Q4_0", "Q5_K_M"):  # third-party style quants without a head, then grafted
        quantize_model(out["trunk"], d / f"trunk-{q}.gguf", q)
        out[f"{q}+head"] = graft(out["head"], d / f"trunk-{q}.gguf", d / f"tiny-{q}-grafted.gguf",
                                 progress=False).paths[0]
    return out


def acceptance(model: Path, mtp: object = "auto", n_draft: int = 1) -> tuple[float, list[float], list[list[int]]]:
    """Greedy generation from the reference prompts; (acceptance, acceptance per position, generations)."""
    gens = []
    with MTPSession(model, mtp=mtp, n_draft=n_draft, n_ctx=512, n_gpu_layers=NGL) as s:
        for p in REF["prompts"]:
            gens.append(s.generate(p, max_tokens=REF["new_tokens"]).tokens)
        st = s.stats
    return st.acceptance, st.acceptance_at, gens


def test_tokenizer_matches_hugging_face(files: dict[str, Path]) -> None:
    with Model(files["bundled"]) as m:
        for text, ids in zip(REF["prompts"], REF["prompt_tokens"]):
            assert m.tokenize(text) == ids, text


def test_logits_match_pytorch(files: dict[str, Path]) -> None:
    z = np.load(TINY / REF["logits_file"])
    with Model(files["f32"], n_gpu_layers=NGL) as m, Context(m, n_ctx=256) as c:
        got = []
        for toks in z["tokens"]:
            c.clear()
            for j, t in enumerate(toks):
                helpers.decode(c, [int(t)], j)
                got.append(c.logits_view(0).copy())
    got, want = np.stack(got), z["logits"].reshape(-1, z["logits"].shape[-1])
    top1 = float(np.mean(got.argmax(-1) == want.argmax(-1)))
    diff = float(np.abs(got - want).max())
    print(f"top-1 agreement {top1:.4f} over {len(got)} positions, max |logit diff| {diff:.4f} "
          f"(logits up to {np.abs(want).max():.1f})")
    assert top1 >= 0.99
    assert diff < 0.05  # measured 0.008 (f32 GGUF; llama.cpp keeps an f16 KV cache)


def test_acceptance_through_gguf_mtp_run(files: dict[str, Path], tmp_path: Path) -> None:
    """The CLI, prompt by prompt, with --stats-json: the figure a user sees."""
    drafted = accepted = 0
    for i, p in enumerate(REF["prompts"]):
        sj = tmp_path / f"s{i}.json"
        r = CliRunner().invoke(app, ["run", str(files["bundled"]), "-p", p, "-n", str(REF["new_tokens"]),
                                     "--spec-draft-n-max", "1", "-c", "512", "-ngl", str(NGL),
                                     "--stats-json", str(sj)])
        assert r.exit_code == 0, r.output
        st = json.loads(sj.read_text())
        assert st["mtp"] == "bundled"
        drafted, accepted = drafted + st["drafted"], accepted + st["accepted"]
    acc = accepted / drafted
    print(f"acceptance k=1 through gguf-mtp run: {acc:.3f} ({accepted}/{drafted}); "
          f"PyTorch reference {REF['acceptance_k1']:.3f}")
    assert acc >= 0.40
    assert abs(acc - REF["acceptance_k1"]) <= TOL


@pytest.mark.parametrize("pairing", ["bundled", "trunk+self-contained", "trunk+head-only", "Q5_K_M+head", "Q4_0+head"])
def test_same_acceptance_in_every_layout(files: dict[str, Path], pairing: str) -> None:
    model, mtp = {"bundled": (files["bundled"], "auto"), "trunk+self-contained": (files["trunk"], files["mtp"]),
                  "trunk+head-only": (files["trunk"], files["head"])}.get(pairing, (files.get(pairing), "auto"))
    acc, _, gens = acceptance(model, mtp)
    same = sum(g == want for g, want in zip(gens, REF["generated"]))
    print(f"{pairing}: acceptance {acc:.3f}, generations identical to PyTorch's: {same}/{len(gens)}")
    # A 4-bit trunk of a 10M-parameter model changes its own greedy paths (1 of 16 stays identical) and the
    # hidden states the head was trained on: measured 0.696 at Q4_0, 0.713 Q4_K_M, 0.750 Q5_K_M, 0.754 Q8_0.
    assert abs(acc - REF["acceptance_k1"]) <= (0.10 if pairing == "Q4_0+head" else TOL)
    if "+head" not in pairing:
        assert same >= len(gens) * 3 // 4


def _mutated_checkpoint(dst: Path, name: str, fn) -> Path:  # type: ignore[no-untyped-def]
    """A copy of the shipped checkpoint with one tensor changed the way a converter bug would change it."""
    shutil.copytree(TINY, dst)
    index = json.loads((TINY / "model.safetensors.index.json").read_text())
    shard = dst / index["weight_map"][name]
    refs = read_header(shard)
    arrays = {n: whole(r) for n, r in refs.items()}  # float32 holding bf16 values exactly
    arrays[name] = fn(arrays[name])
    shard.unlink()
    bf16 = {n: (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16) for n, a in arrays.items()}
    write_safetensors(shard, [(n, a.shape, "BF16", lambda a=a: a) for n, a in bf16.items()])
    return dst


def _swap_halves(w: np.ndarray) -> np.ndarray:
    h = w.shape[1] // 2
    return np.concatenate([w[:, h:], w[:, :h]], 1)


def _drop_plus_one(w: np.ndarray) -> np.ndarray:
    return w - 1.0  # the converter adds 1 back: the GGUF gets the raw offset, as if the +1 were forgotten


@pytest.mark.parametrize("bug", ["eh_proj halves swapped", "hnorm without +1"])
def test_wrong_head_mapping_is_caught(tmp_path: Path, bug: str) -> None:
    name, fn = {"eh_proj halves swapped": ("mtp.fc.weight", _swap_halves),
                "hnorm without +1": ("mtp.pre_fc_norm_hidden.weight", _drop_plus_one)}[bug]
    ck = _mutated_checkpoint(tmp_path / "ck", name, fn)
    f = convert(ck, outfile=tmp_path / "bad.gguf", progress=False).path
    acc, _, _ = acceptance(f)
    print(f"{bug}: acceptance {acc:.3f} (correct head: {REF['acceptance_k1']:.3f})")
    assert acc < REF["acceptance_k1"] / 2


def test_deeper_drafts_chain_the_heads_own_hidden_rows(files: dict[str, Path]) -> None:
    """Draft 2 and 3 feed the head its own hidden row of the draft before. The head's decodes carry several
    tokens (the verified ones ride with the first draft; stable shapes pad every decode), so the row must be the
    output token's, not the batch's first (llama.cpp's masked copy gives the first: 72/31/17% instead of
    72/40/24% here). Only a trained head shows it: the synthetic oracle heads ignore the hidden row."""
    got = {}
    for stable in (False, True):
        with MTPSession(files["bundled"], n_draft=3, n_ctx=512, n_gpu_layers=NGL, stable_shapes=stable) as s:
            for p in REF["prompts"]:
                s.generate(p, max_tokens=REF["new_tokens"])
            got[stable] = s.stats.acceptance_at
    print(f"acceptance by position at k=3: {[round(x, 3) for x in got[False]]} (stable shapes: "
          f"{[round(x, 3) for x in got[True]]})")
    for acc in got.values():
        assert acc[0] >= 0.65 and acc[1] >= 0.36 and acc[2] >= 0.20  # measured 0.722 / 0.396 / 0.235 (CPU)
    # the padding re-decodes the same inputs: the same acceptance up to rounding (a batch of more rows may take other
    # kernels and break a near-tie in a draft the other way; tests/lossless.py), where a wrong cache would cost far more
    assert all(abs(a - b) <= 0.02 for a, b in zip(got[True], got[False])), got
