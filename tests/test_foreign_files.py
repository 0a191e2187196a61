"""Heads and models from other tools: files written by llama.cpp's converter (tests/data/ref, see
scripts/make_reference_ggufs.py) and by llama.cpp's quantizer (llama_model_quantize, llama-quantize's code), mixed
with gguf-mtp's own, as single files and split sets, bundled and in both sidecar flavours.

llama.cpp's converter writes ``ffn_gate_inp_shexp.weight`` as ``[n_embd, 1]``; llama-quantize and gguf-mtp write
``[n_embd]``. ggml sees one tensor; every place where a head meets a model must too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from gguf_mtp import convert, surgery
from gguf_mtp.errors import CompatibilityError
from gguf_mtp.file_report import inspect_file
from gguf_mtp.ggml_types import choose_type
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.ggufio.shape import ggml_shape, same_ggml_shape
from gguf_mtp.quantize import llama_quantize as quantize
from gguf_mtp.runtime import MTPSession
from gguf_mtp.runtime.pairing import HeadSource, resolve
from tests import helpers
from tests.lossless import Reference
from tests.synthetic import SyntheticSpec, write_checkpoint

REF = Path(__file__).parent / "data" / "ref"
CASES = json.loads((REF / "manifest.json").read_text())["cases"]
SHEXP = "ffn_gate_inp_shexp.weight"
PROMPT = "The quick brown fox jumps over the lazy dog. def main(argv): return 1"


def test_ggml_shape() -> None:
    assert ggml_shape((256, 1)) == (256,) and ggml_shape((256,)) == (256,) and ggml_shape((1,)) == (1,)
    assert ggml_shape((64, 1, 4)) == (64, 1, 4) and ggml_shape((1, 1)) == (1,)
    assert same_ggml_shape((256, 1), (256,)) and not same_ggml_shape((256, 2), (256,))
    # a [n, 1] router of the shared expert is a vector: it stays F32 when a head is re-encoded
    assert choose_type("blk.2." + SHEXP, (64, 1), GGMLQuantizationType.Q8_0) == GGMLQuantizationType.F32


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Every kind of qwen35moe file, all of the same model (the checkpoint the references came from)."""
    root = tmp_path_factory.mktemp("foreign")
    case = CASES["qwen35moe"]
    ck = write_checkpoint(root / "ck", SyntheticSpec(case["family"], **case["spec"]))
    f: dict[str, Path] = {
        "llama bundled": REF / "qwen35moe.gguf",              # llama.cpp's converter, Q8_0, with its head
        "llama mtp": REF / "qwen35moe-mtp.gguf",              # llama.cpp's converter --mtp (self-contained)
        "llama trunk": REF / "qwen35moe-trunk.gguf",          # llama.cpp's converter --no-mtp
    }
    # llama-quantize's Q4_K_M (llama_model_quantize) of an f16 trunk: quantizing needs a float input
    f["ours f16 trunk"] = convert(ck, outfile=root / "ours-F16-trunk.gguf", outtype="f16", layout="trunk-only",
                                  progress=False).path
    f["quantize trunk"] = quantize(f["ours f16 trunk"], root / "m-Q4_K_M.gguf", "Q4_K_M")
    f["ours bundled"] = convert(ck, outfile=root / "ours.gguf", outtype="q8_0", progress=False).path
    f["ours trunk"] = convert(ck, outfile=root / "ours-trunk.gguf", outtype="q8_0", layout="trunk-only",
                              progress=False).path
    f["ours head-only"] = convert(ck, outfile=root / "ours-head.gguf", layout="head-only", progress=False).path
    for src in ("llama bundled", "llama mtp"):
        for flavour, head_only in (("head-only", True), ("self-contained", False)):
            out = root / f"{src.split()[1]}-{flavour}.gguf"
            f[f"{src} -> {flavour}"] = surgery.extract(f[src], out, head_only=head_only, progress=False).paths[0]
    f["quantize trunk split"] = helpers.reshard(f["quantize trunk"], root / "q4split.gguf", shards=2)[0]
    return f


def test_the_files_differ_as_the_tools_write_them(files) -> None:
    """The premise: llama.cpp's converter writes [n_embd, 1], llama-quantize and gguf-mtp [n_embd]."""
    shape = lambda key, blk: GGUFModel(files[key]).tensors[f"blk.{blk}.{SHEXP}"].info.shape  # noqa: E731
    assert shape("llama bundled", 2) == (64, 1) and shape("llama mtp", 2) == (64, 1)
    assert shape("llama trunk", 0) == (64, 1)
    assert shape("quantize trunk", 0) == (64,) and shape("ours bundled", 2) == (64,)
    assert GGUFModel(files["quantize trunk"]).tensors["blk.0.ffn_down_exps.weight"].info.type_name != "F16"


HEADS = ["llama bundled", "llama mtp", "llama bundled -> head-only", "llama bundled -> self-contained",
         "llama mtp -> head-only", "ours bundled", "ours head-only"]
TARGETS = ["llama trunk", "quantize trunk", "quantize trunk split", "ours trunk"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("head", HEADS)
def test_every_head_grafts_onto_every_target(files, head: str, target: str, tmp_path: Path) -> None:
    r = surgery.graft(files[head], files[target], tmp_path / "g.gguf", progress=False)
    rep = inspect_file(r.paths[0])
    assert rep.layout.value == "bundled" and rep.mtp_layers == 1
    assert len(r.paths) == (2 if target.endswith("split") else 1)
    src = GGUFModel(files[head])
    out = GGUFModel(r.paths[0])
    for name, t in out.tensors.items():  # head tensors are copied as their file wrote them
        if name.startswith("blk.2.") and name in src.tensors:
            assert t.info.shape == src.tensors[name].info.shape


@pytest.mark.parametrize("head", ["llama mtp", "llama bundled -> head-only", "llama bundled -> self-contained"])
def test_sidecar_discovery_pairs_foreign_sidecars(files, head: str, tmp_path: Path) -> None:
    trunk = tmp_path / "model-Q4_K_M.gguf"
    trunk.symlink_to(files["quantize trunk"])
    (tmp_path / "mtp-model-Q4_K_M.gguf").symlink_to(files[head])
    p = resolve(trunk)
    assert p.source in (HeadSource.SELF_CONTAINED, HeadSource.HEAD_ONLY), p.notice


def test_a_head_of_another_model_is_still_refused(files, tmp_path: Path) -> None:
    """Dropping trailing 1s must not make real mismatches pass: a head with other expert sizes is refused."""
    case = CASES["qwen35moe"]
    other = write_checkpoint(tmp_path / "other", SyntheticSpec("qwen35moe", **{**case["spec"], "moe_intermediate": 64}))
    head = convert(other, outfile=tmp_path / "other-head.gguf", layout="head-only", progress=False).path
    with pytest.raises(CompatibilityError, match="ffn_"):
        surgery.graft(head, files["quantize trunk"], tmp_path / "x.gguf", progress=False)


def _session(model: Path, mtp, n_draft: int = 3) -> MTPSession:  # type: ignore[no-untyped-def]
    return MTPSession(model, mtp=mtp, n_ctx=512, n_batch=32, n_draft=n_draft)


def _generate(s: MTPSession):  # type: ignore[no-untyped-def]
    return s.generate(PROMPT, max_tokens=40)


def _decode(model: Path, mtp, n_draft: int = 3):  # type: ignore[no-untyped-def]
    with _session(model, mtp, n_draft) as s:
        return _generate(s), s.pairing.source


@pytest.mark.parametrize("how", ["graft from llama.cpp's bundled Q8_0", "llama.cpp's --mtp sidecar at run time",
                                 "head-only sidecar at run time", "graft onto a split Q4_K_M"])
def test_llamacpp_head_on_a_llama_quantize_trunk_runs_losslessly(files, how: str, tmp_path: Path) -> None:
    """The issue's case: the head of a llama.cpp-converted bundled qwen35moe Q8_0 on anyone's Q4_K_M."""
    trunk = files["quantize trunk"]
    plain = Reference(lambda: _session(trunk, False), _generate)
    if how.startswith("graft"):
        target = files["quantize trunk split"] if "split" in how else trunk
        model = surgery.graft(files["llama bundled"], target, tmp_path / "g.gguf", progress=False).paths[0]
        mtp, want = "auto", HeadSource.BUNDLED
    elif "--mtp" in how:
        model, mtp, want = trunk, files["llama mtp"], HeadSource.SELF_CONTAINED
    else:
        model, mtp, want = trunk, files["llama bundled -> head-only"], HeadSource.HEAD_ONLY
    g, source = _decode(model, mtp)
    assert source == want
    plain.check(g, how)  # lossless
    assert g.stats.drafted > 0 and g.stats.accepted > 0  # the head is wired: its drafts are accepted


def test_quantize_keeps_a_llamacpp_head_whole(files, tmp_path: Path) -> None:
    """gguf-mtp quantize (llama.cpp's quantizer with the head pinned) on a graft of llama.cpp's head onto an f16
    trunk: the [n_embd, 1] router stays F32 and the result still runs with its head."""
    from gguf_mtp.quantize import quantize_model

    grafted = surgery.graft(files["llama bundled -> head-only"], files["ours f16 trunk"], tmp_path / "g-F16.gguf",
                            progress=False).paths[0]
    r = quantize_model(grafted, tmp_path / "g-Q4_K_M.gguf", "Q4_K_M")
    head = {t.name: t for t in r.report.mtp_tensors}
    assert head[f"blk.2.{SHEXP}"].type == "F32" and head["blk.2.attn_q.weight"].type == "Q8_0"
    g, source = _decode(r.path, "auto", n_draft=2)
    assert source == HeadSource.BUNDLED and g.stats.accepted > 0


def test_a_draft_vocabulary_on_files_llamacpp_wrote(files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 on files other tools wrote: ``gguf-mtp extract --head-only --draft-vocab`` of llama.cpp's converted
    bundled Q8_0 (the default map: the merge order of llama.cpp's own tokenizer metadata) paired with
    llama-quantize's Q4_K_M trunk, and ``gguf-mtp quantize --draft-vocab`` of the same file (llama.cpp's quantizer).
    Both answer as plain decoding; a library with the draft-vocab patch drafts inside the map only, a stock one
    reads the full head."""
    from gguf_mtp import draft_vocab as dv
    from gguf_mtp.runtime import patches
    from gguf_mtp_cli.main import main as cli
    from tests.test_draft_vocab import _record_drafts, ids_of

    n, src = 256, files["llama bundled"]
    head = tmp_path / "head-dv.gguf"
    assert cli(["extract", str(src), "--head-only", "--draft-vocab", str(n), "-o", str(head), "-q"]) == 0
    bundled = tmp_path / "q4-dv.gguf"
    assert cli(["quantize", str(src), str(bundled), "Q4_K_M", "--allow-requantize", "--draft-vocab", str(n),
                "-q"]) == 0
    m = GGUFModel(src)
    ids = ids_of(head)
    assert ids is not None and len(ids) == n and set(dv.required_ids(m.get)) <= set(ids.tolist())
    assert ids_of(bundled) is not None and ids_of(bundled).tolist() == ids.tolist()  # type: ignore[union-attr]
    patched = "draft-vocab" in patches.names()
    for model, mtp, plain_model in ((files["quantize trunk"], head, files["quantize trunk"]),
                                    (bundled, "auto", bundled)):
        plain = Reference(lambda p=plain_model: _session(p, False), _generate)  # type: ignore[misc]
        seen = _record_drafts(monkeypatch)
        g, _ = _decode(model, mtp)
        monkeypatch.undo()
        plain.check(g, f"{model.name} with a draft vocabulary")
        assert g.stats.drafted > 0 and len(seen) >= g.stats.drafted
        if patched:
            outside = [t for t in seen if t not in set(ids.tolist())]
            assert not outside, f"{len(outside)} of {len(seen)} drafts outside the map"


@pytest.mark.parametrize("pairing", ["llama.cpp's bundled Q8_0", "llama-quantize's split Q4_K_M + llama.cpp's head",
                                     "llama-quantize's Q4_K_M + llama.cpp's --mtp sidecar"])
def test_a_session_draft_vocabulary_on_files_llamacpp_wrote(files, pairing: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``run --draft-vocab`` on files other tools wrote, none of them rewritten: the session chooses the map from
    llama.cpp's own tokenizer metadata, the output is plain decoding's, a patched library drafts inside it only,
    and every file keeps its bytes."""
    import hashlib

    from gguf_mtp import draft_vocab as dv
    from gguf_mtp.runtime import patches
    from tests.test_draft_vocab import _record_drafts

    model, mtp = {"llama.cpp's bundled Q8_0": (files["llama bundled"], "auto"),
                  "llama-quantize's split Q4_K_M + llama.cpp's head": (files["quantize trunk split"],
                                                                        files["llama bundled -> head-only"]),
                  "llama-quantize's Q4_K_M + llama.cpp's --mtp sidecar": (files["quantize trunk"],
                                                                           files["llama mtp"])}[pairing]
    inputs = [p for p in (model, mtp) if isinstance(p, Path)]
    digest = lambda: [hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs]  # noqa: E731
    before = digest()
    want = dv.choose(GGUFModel(files["llama bundled"]).model_kvs(), 256, None, "llama.cpp's file")
    plain = Reference(lambda: _session(model, False), _generate)
    seen = _record_drafts(monkeypatch)
    with MTPSession(model, mtp=mtp, n_ctx=512, n_batch=32, n_draft=3, draft_vocab=256) as s:
        g = _generate(s)
        chosen = s.draft_vocab
    monkeypatch.undo()
    plain.check(g, f"{pairing}, session draft vocabulary")
    assert g.stats.drafted > 0 and len(seen) >= g.stats.drafted
    if "draft-vocab" in patches.names():
        assert chosen is not None and chosen.tolist() == want.tolist()
        outside = [t for t in seen if t not in set(want.tolist())]
        assert not outside, f"{len(outside)} of {len(seen)} drafts outside the session's map"
    assert digest() == before
