"""The draft LM head (``--draft-head-type``): a lower-bit copy of the LM head in the MTP layer, read by the drafts
only. Run on the shipped trained model with the real llama.cpp: output must equal plain decoding, acceptance must
stay close to the full head's, and a draft head with wrong contents must collapse acceptance (so llama.cpp
demonstrably reads it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import Keys
from gguf_mtp_cli.main import main

from gguf_mtp import convert
from gguf_mtp.archs import ARCHS
from gguf_mtp.draft_head import draft_layers
from gguf_mtp.errors import GgufMtpError, UnsupportedError
from gguf_mtp.file_report import inspect_file
from gguf_mtp.ggml_types import dequantize, encode
from gguf_mtp.ggufio.model import GGUFModel, Tensor
from gguf_mtp.ggufio.writer import OutTensor, copy_tensor, write_all, write_gguf
from gguf_mtp.quantize import quantize_model
from gguf_mtp.runtime import MTPSession
from gguf_mtp.surgery import extract, graft
from tests import helpers
from tests.gguf_mutate import RawGGUF
from tests.lossless import Reference, References

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
REF = json.loads((TINY / "reference.json").read_text())
NGL = int(os.environ.get("GGUF_MTP_TEST_NGL", "0"))
DRAFT = "blk.8.nextn.shared_head_head.weight"  # the tiny model's one MTP layer follows 8 trunk layers
PROMPT = "The quick brown fox jumps over the lazy dog. " * 3


def values(m: GGUFModel, name: str) -> np.ndarray:
    info = m.tensors[name].info
    return dequantize(m.tensors[name].file.read_tensor_bytes(name), info.ggml_type, info.shape)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("draft")
    out = {}
    for name, kw in {"plain": {}, "q8_0": {"draft_head_type": "q8_0"}, "q4_0": {"draft_head_type": "q4_0"},
                     "trunk": {"layout": "trunk-only"}, "head": {"layout": "head-only"}}.items():
        out[name] = convert(TINY, outfile=d / f"tiny-{name}.gguf", progress=False, **kw).path
    out["trunk-Q4_0"] = quantize_model(out["trunk"], d / "trunk-Q4_0.gguf", "Q4_0").path  # a third-party style quant
    return out


def run(model: Path, mtp: object = "auto", n_draft: int = 1, prompts: int | None = None) -> tuple[float, list]:
    """Greedy generations from the reference prompts, and the acceptance."""
    gens = []
    with MTPSession(model, mtp=mtp, n_draft=n_draft, n_ctx=512, n_gpu_layers=NGL) as s:
        for p in REF["prompts"][:prompts]:
            gens.append(s.generate(p, max_tokens=REF["new_tokens"]).tokens)
        acc = s.stats.acceptance if mtp is not False else 0.0
    return acc, gens


def plain_refs(model: Path, prompts: int | None = None) -> References:
    """Plain decoding of the reference prompts on ``model``: what every speculative run must match (lossless.py)."""
    gens = run(model, mtp=False, prompts=prompts)[1]
    actions = [lambda s, p=p: s.generate(p, max_tokens=REF["new_tokens"]) for p in REF["prompts"][:prompts]]
    return References(lambda: MTPSession(model, mtp=False, n_ctx=512, n_gpu_layers=NGL), actions, gens)


def draft_bytes(path: Path) -> bytes:
    return GGUFModel(path).tensors[DRAFT].file.read_tensor_bytes(DRAFT)


def draft_type(path: Path) -> str | None:
    t = GGUFModel(path).tensors.get(DRAFT)
    return None if t is None else t.info.type_name


@pytest.fixture(scope="module")
def plain(files: dict[str, Path]) -> References:
    return plain_refs(files["plain"])


def test_a_q4_0_draft_head_keeps_output_and_acceptance(files: dict[str, Path], plain: References) -> None:
    assert draft_type(files["q4_0"]) == "Q4_0" and draft_type(files["q8_0"]) == "Q8_0"
    assert draft_type(files["plain"]) is None  # no option: no extra tensor
    report = inspect_file(files["q4_0"])
    assert [t.type for t in report.draft_heads] == ["Q4_0"]
    assert report.lm_head is not None and report.lm_head.name == "output.weight"
    assert "draft LM head  Q4_0" in report.format()
    for k in (1, 3):
        acc = {}
        for name in ("q8_0", "q4_0"):
            acc[name], gens = run(files[name], n_draft=k)
            plain.check(gens, f"{name} draft head, k={k}")
        print(f"k={k}: acceptance with a Q8_0 draft head {acc['q8_0']:.3f}, Q4_0 {acc['q4_0']:.3f}")
        # measured on the CPU: k=1 0.748 / 0.736, k=3 0.445 / 0.444
        assert abs(acc["q4_0"] - acc["q8_0"]) <= 0.03


def _with_draft_head(src: Path, out: Path, rows: np.ndarray | None) -> Path:
    """``src`` plus a Q8_0 draft head holding its LM head's rows in the order ``rows`` (None: all zeros)."""
    m = GGUFModel(src)
    lm = m.tensors["output.weight"].info
    x = dequantize(m.tensors["output.weight"].file.read_tensor_bytes(lm.name), lm.ggml_type, lm.shape)
    x = np.zeros_like(x) if rows is None else x[rows]

    def write(fh: BinaryIO, progress) -> None:  # type: ignore[no-untyped-def]
        write_all(fh, encode(x.reshape(-1), T.Q8_0))

    tensors = [copy_tensor(Tensor(i, m.shards[0])) for i in m.shards[0].tensors.values()]
    write_gguf(out, m.model_kvs(), tensors + [OutTensor(DRAFT, lm.shape, T.Q8_0, write)], alignment=m.alignment)
    return out


def test_llama_cpp_reads_the_draft_head(files: dict[str, Path], tmp_path: Path) -> None:
    """The same file with the draft head's rows shifted by one token (or zeroed) never gets a draft accepted, while
    the rows in order keep the full head's acceptance: the drafts come from the draft head, not output.weight."""
    vocab = GGUFModel(files["plain"]).tensors["output.weight"].info.shape[1]
    acc, want = {}, plain_refs(files["plain"], prompts=4)
    for name, rows in {"right": np.arange(vocab), "shifted": np.roll(np.arange(vocab), 1), "zeros": None}.items():
        f = _with_draft_head(files["plain"], tmp_path / f"{name}.gguf", rows)
        acc[name], gens = run(f, prompts=4)
        want.check(gens, f"draft head {name}")  # lossless whatever the head says
    print(f"acceptance with the draft head right / shifted / zeros: {acc}")
    assert acc["right"] >= 0.65
    assert acc["shifted"] < 0.05 and acc["zeros"] < 0.2


def test_quantize_keeps_or_adds_the_draft_head(files: dict[str, Path], tmp_path: Path, plain: References) -> None:
    kept = quantize_model(files["q4_0"], tmp_path / "kept.gguf", "Q4_K_M")
    assert draft_type(kept.path) == "Q4_0"  # not the head's Q8_0 pin
    head = {t.name: t.type for t in kept.report.mtp_tensors}
    assert head["blk.8.attn_q.weight"] == "Q8_0" and kept.report.lm_head and kept.report.lm_head.type == "Q6_K"
    added = quantize_model(files["plain"], tmp_path / "added.gguf", "Q4_K_M", draft_head_type="q5_0", progress=False)
    assert draft_type(added.path) == "Q5_0"
    changed = quantize_model(files["q4_0"], tmp_path / "changed.gguf", "Q4_K_M", draft_head_type="q8_0",
                             progress=False)
    assert draft_type(changed.path) == "Q8_0"
    assert not list(tmp_path.glob(".*partial"))
    # the trunk is llama.cpp's in all three: only the draft head differs
    a, b = GGUFModel(kept.path), GGUFModel(added.path)
    assert all(a.tensors[n].file.read_tensor_bytes(n) == b.tensors[n].file.read_tensor_bytes(n)
               for n in a.tensors if n != DRAFT)
    want = plain_refs(kept.path, prompts=4)
    for f in (kept.path, added.path):
        acc, gens = run(f, prompts=4)
        want.check(gens, f.name)
        assert acc >= 0.6
    with pytest.raises(GgufMtpError, match="no MTP head to give a draft head"):
        quantize_model(files["trunk"], tmp_path / "t.gguf", "Q4_K_M", draft_head_type="q4_0")


def test_extract_and_graft_carry_the_draft_head(files: dict[str, Path], tmp_path: Path, plain: References) -> None:
    # a sidecar extracted without the option carries the draft head byte for byte
    side = extract(files["q4_0"], tmp_path / "side.gguf", head_only=True, progress=False).paths[0]
    assert draft_bytes(side) == draft_bytes(files["q4_0"])
    # ... and --mtp-type leaves it as it is (only --draft-head-type changes it)
    assert draft_type(extract(files["q4_0"], tmp_path / "m.gguf", mtp_type="bf16", progress=False).paths[0]) == "Q4_0"
    # made at extract time, from the model's LM head: self-contained and head-only sidecars
    made = extract(files["plain"], tmp_path / "made.gguf", draft_head_type="q4_0", progress=False).paths[0]
    made_h = extract(files["plain"], tmp_path / "made-h.gguf", head_only=True, draft_head_type="q4_0",
                     progress=False).paths[0]
    for f in (made, made_h):
        assert draft_bytes(f) == draft_bytes(files["q4_0"])  # the same encoder on the same bf16 LM head
    # the runtime's pairings use it: the head-only sidecar merged at load time, the self-contained one beside
    for sidecar in (made_h, made):
        acc, gens = run(files["trunk"], mtp=sidecar)
        plain.check(gens, sidecar.name)
        assert acc == pytest.approx(run(files["q4_0"])[0], abs=0.005)
    # graft onto a llama-quantize'd trunk: carried from the sidecar, or made from the target's LM head (Q6_K)
    carried = graft(side, files["trunk-Q4_0"], tmp_path / "g1.gguf", progress=False).paths[0]
    assert draft_type(carried) == "Q4_0"
    plain_head = files["head"]  # no draft head, no LM head: --draft-head-type takes the target's
    made_g = graft(plain_head, files["trunk-Q4_0"], tmp_path / "g2.gguf", draft_head_type="q4_0", progress=False)
    assert draft_type(made_g.paths[0]) == "Q4_0"
    want = plain_refs(files["trunk-Q4_0"], prompts=8)
    ref = run(graft(plain_head, files["trunk-Q4_0"], tmp_path / "g0.gguf", progress=False).paths[0], prompts=8)[0]
    for f in (carried, made_g.paths[0]):
        acc, gens = run(f, prompts=8)
        want.check(gens, f.name)
        assert abs(acc - ref) <= 0.05
    # a split target: the draft head goes with the head into the last shard
    split = helpers.reshard(files["trunk-Q4_0"], tmp_path / "split.gguf", shards=2)
    g = graft(plain_head, split[0], tmp_path / "gs.gguf", draft_head_type="q4_0", progress=False)
    assert len(g.paths) == 2 and DRAFT in GGUFModel(g.paths[1]).shards[-1].tensors
    assert draft_type(g.paths[0]) == "Q4_0"


def test_draft_head_errors(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnsupportedError, match="--draft-head-type 'q4_k' is not supported; choose one of q4_0"):
        extract(files["plain"], tmp_path / "x.gguf", draft_head_type="q4_k")
    # an LM head gguf-py cannot decode: the error names the tensor and what to do
    bad = RawGGUF.read(files["trunk-Q4_0"]).retype("output.weight", T.Q1_0).write(tmp_path / "q1.gguf")
    with pytest.raises(UnsupportedError, match=r"tensor 'output.weight' is Q1_0, which gguf-mtp cannot decode"):
        graft(files["head"], bad, tmp_path / "y.gguf", draft_head_type="q4_0")
    for argv, needle in [
        (["convert", str(TINY), "-o", str(tmp_path / "c.gguf"), "--draft-head-type", "q3"],
         "--draft-head-type 'q3' is not supported"),
        (["convert", str(TINY), "-o", str(tmp_path / "c.gguf"), "--no-mtp", "--draft-head-type", "q4_0"],
         "--draft-head-type is for the MTP head"),
        (["extract", str(files["head"]), "--onto", str(bad), "-o", str(tmp_path / "y.gguf"), "--draft-head-type",
          "q4_0"], "which gguf-mtp cannot decode to make the draft head"),
        (["extract", str(files["q4_0"]), "--strip", "--draft-head-type", "q4_0"], "--draft-head-type"),
        (["quantize", str(files["plain"]), str(tmp_path / "q.gguf"), "Q4_K_M", "--draft-head-type", "iq4_xs"],
         "--draft-head-type 'iq4_xs' is not supported"),
    ]:
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc == 2 and needle in err and "Traceback" not in err, (argv, err)
        assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    assert not (tmp_path / "y.gguf").exists() and not (tmp_path / "q.gguf").exists()


def test_the_draft_head_is_encoded_in_row_chunks(files: dict[str, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 3 rows (the last one short) give the bytes of one whole-tensor encode: memory is bounded by the
    chunk, whatever the vocabulary (a 248k x 4096 LM head would be 4 GB of float32 at once)."""
    import gguf_mtp.draft_head as dh

    monkeypatch.setattr(dh, "CHUNK_ELEMS", 3 * 256)
    small = extract(files["plain"], tmp_path / "s.gguf", head_only=True, draft_head_type="q4_0", progress=False)
    assert draft_bytes(small.paths[0]) == draft_bytes(files["q4_0"])
    # from a split set (the LM head read from whichever shard holds it)
    split = helpers.reshard(files["plain"], tmp_path / "split.gguf", shards=3)
    side = extract(split[1], tmp_path / "from-split.gguf", draft_head_type="q4_0", progress=False)
    assert draft_bytes(side.paths[0]) == draft_bytes(files["q4_0"])


@pytest.mark.parametrize("family", sorted(ARCHS))
def test_every_family_gets_a_draft_head_where_its_graph_reads_one(checkpoint, converted, family: str,
                                                                   tmp_path: Path) -> None:
    """The layers llama.cpp's graph runs get one (chained heads: each of them), made from the layer's own head where
    the release has one (values checked against it), else from the LM head; the file loads and decodes losslessly."""
    plain_file = converted(family, "bundled")
    out = tmp_path / f"{family}.gguf"
    convert(checkpoint(family), outfile=out, outtype="q8_0", draft_head_type="q4_0", progress=False)
    m, base = GGUFModel(out), GGUFModel(plain_file)
    n_mtp = int(m.arch_get(Keys.LLM.NEXTN_PREDICT_LAYERS))
    n_trunk = int(m.arch_get(Keys.LLM.BLOCK_COUNT)) - n_mtp
    layers = draft_layers(m.arch, n_trunk, n_mtp)
    assert len(layers) == (n_mtp if ARCHS[family].max_heads is None else 1)
    for il in range(n_trunk, n_trunk + n_mtp):
        name = f"blk.{il}.nextn.shared_head_head.weight"
        if il not in layers:
            assert (name in m.tensors) == (name in base.tensors)
            continue
        got = values(m, name)
        want = values(base, name if name in base.tensors else ("output.weight" if "output.weight" in base.tensors
                                                               else "token_embd.weight"))
        assert m.tensors[name].info.ggml_type == T.Q4_0
        assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.98, name
        print(family, name, "own head" if name in base.tensors else "LM head")
    with MTPSession(out, n_draft=2, n_ctx=256) as s:
        spec = s.generate(PROMPT, max_tokens=12)
    Reference(lambda: MTPSession(out, mtp=False, n_ctx=256), lambda s: s.generate(PROMPT, max_tokens=12)).check(
        spec, f"{family}, draft head Q4_0")


def test_rows_that_do_not_fill_blocks_are_refused(checkpoint, tmp_path: Path) -> None:
    ck = checkpoint("qwen35", hidden=48)
    with pytest.raises(UnsupportedError, match=r"rows of 48, not a multiple of the Q4_0 block \(32\)"):
        convert(ck, outfile=tmp_path / "a.gguf", draft_head_type="q4_0", progress=False)
    plain_file = convert(ck, outfile=tmp_path / "b.gguf", progress=False).path
    with pytest.raises(UnsupportedError, match=r"'output.weight' has rows of 48"):
        extract(plain_file, tmp_path / "c.gguf", draft_head_type="q4_0", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.gguf"]
