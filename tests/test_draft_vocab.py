"""The draft vocabulary (``--draft-vocab N``, gguf_mtp/draft_vocab.py, patches/llama.cpp/0002-draft-vocab.patch).

Writers: convert / extract / quantize name the N tokens in the ``gguf_mtp.draft_vocab`` metadata array (the N
lowest BPE ids, or the N most frequent in a text), keep every control and end-of-generation token, and refuse a
bad N or a bad file in one line; the map travels with the head (extract keeps it, --strip drops it, --onto
carries it). Library: a stock llama.cpp ignores the key (same output as without it); the patched one makes the
drafts come from the map only, while the output stays plain decoding's (tests/lossless.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType

from gguf_mtp import draft_vocab as dv
from gguf_mtp.convert import convert
from gguf_mtp.errors import UnsupportedError
from gguf_mtp.ggufio.format import KV
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.quantize import quantize_model
from gguf_mtp.runtime import MTPSession, patches
from gguf_mtp.runtime.llama import Model
from gguf_mtp.surgery import add_draft_head, extract, graft, strip
from tests.gguf_mutate import RawGGUF
from tests.lossless import Reference

from .test_runtime import lossless_spec

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny-qwen35-mtp"
REF = json.loads((TINY / "reference.json").read_text())
N = 512  # of the tiny model's 4096 tokens: the share 32768 is of a 248k vocabulary
SPECIALS = [t["id"] for t in json.loads((TINY / "tokenizer.json").read_text())["added_tokens"]]
PATCHED = "draft-vocab" in patches.names()
needs_patch = pytest.mark.skipif(not PATCHED, reason="the loaded llama.cpp lacks the draft-vocab patch "
                                                      "(stock library): the drafts read the full head")
TEXT = ROOT / "gguf_mtp" / "convert.py"  # a UTF-8 text the tests count tokens on


def ids_of(path: Path) -> np.ndarray | None:
    m = GGUFModel(path)
    return dv.read(m.get, m.path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("vocab")
    out = {"full": convert(TINY, outfile=d / "full.gguf", outtype="q8_0", progress=False).path,
           "map": convert(TINY, outfile=d / "map.gguf", outtype="q8_0", draft_vocab=N, progress=False).path,
           "trunk": convert(TINY, outfile=d / "trunk.gguf", outtype="q8_0", layout="trunk-only", progress=False).path,
           "head": convert(TINY, outfile=d / "head.gguf", layout="head-only", draft_vocab=N, progress=False).path}
    out["side"] = extract(out["map"], d / "side.gguf", progress=False).paths[0]  # self-contained, with the map
    return out


def cli(*args: str) -> tuple[int, list[str]]:
    """Run the CLI in this process; (exit status, stderr lines)."""
    import contextlib
    import io

    from gguf_mtp_cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, err.getvalue().splitlines()


# --- the writers ----------------------------------------------------------------------------------------------

def test_convert_names_the_lowest_ids_and_every_special_token(tiny: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    code, err = cli("convert", str(TINY), "--outtype", "q8_0", "--draft-vocab", str(N), "-o", str(out), "-q")
    assert code == 0, err
    ids = ids_of(out)
    assert ids is not None and ids.dtype == np.int32
    # the tokenizer's added (control, end-of-generation) tokens sit at the top of the vocabulary: kept all the same
    assert ids.tolist() == list(range(N - len(SPECIALS))) + SPECIALS
    kv = GGUFModel(out).kv[dv.KEY]
    assert kv.vtype == GGUFValueType.ARRAY and kv.item_type == GGUFValueType.INT32
    assert ids_of(tiny["full"]) is None  # only on request
    with Model(tiny["full"]) as m:
        eos = int(m.meta("tokenizer.ggml.eos_token_id") or -1)
    assert eos in ids.tolist()


def test_draft_vocab_from_a_text_keeps_its_most_frequent_tokens(tiny: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    code, err = cli("convert", str(TINY), "--outtype", "q8_0", "--draft-vocab", "300", "--draft-vocab-from",
                    str(TEXT), "-o", str(out), "-q")
    assert code == 0, err
    got = ids_of(out)
    assert got is not None
    # counted independently: the runtime's own tokenizer on the whole text
    with Model(tiny["full"]) as m:
        toks = m.tokenize(TEXT.read_text(), add_special=False, parse_special=False)
    counts = np.bincount(toks, minlength=4096)
    order = sorted(range(4096), key=lambda i: (-counts[i], i))
    want = set(SPECIALS)
    counted = 300 - round(dv.RANK_SHARE * (300 - len(SPECIALS)))  # the rest: the lowest ids (merge order)
    for i in order:
        if len(want) == counted:
            break
        want.add(i)
    assert dv.RANK_SHARE > 0 and 0 < counted < 300
    for i in range(4096):
        if len(want) == 300:
            break
        want.add(i)
    assert got.tolist() == sorted(want)
    assert got.tolist() != ids_of(tiny["map"]).tolist()[:300]  # type: ignore[union-attr]


def test_a_rank_share_gives_part_of_the_room_to_the_lowest_ids() -> None:
    """by_counts(rank_share=): the required tokens, the most frequent (room minus the share) counted ones, then the
    lowest ids not chosen yet (never a skipped one), n in all; share 0 is the counted choice, 1 the default's."""
    counts = np.zeros(100, dtype=np.int64)
    counts[[90, 80, 70, 60, 50, 3]] = [60, 50, 40, 30, 20, 10]  # a text's tokens, mostly of high ids
    required = {99}
    pure = dv.by_counts(8, counts, required)
    assert pure.tolist() == [0, 3, 50, 60, 70, 80, 90, 99]  # 6 counted, then unseen tokens by lower id
    assert np.array_equal(dv.by_counts(8, counts, required, rank_share=0.0), pure)
    # room 7: round(0.5 * 7) = 4 by rank after the 3 most frequent counted
    half = dv.by_counts(8, counts, required, rank_share=0.5, skip={1})
    assert half.tolist() == [0, 2, 3, 4, 70, 80, 90, 99]
    everything = dv.by_counts(8, counts, required, rank_share=1.0)
    assert np.array_equal(everything, dv.by_rank(8, 100, required))
    with pytest.raises(ValueError):
        dv.by_counts(8, counts, required, rank_share=1.5)


def test_the_map_travels_with_the_head(tiny: dict[str, Path], tmp_path: Path) -> None:
    want = ids_of(tiny["map"])
    assert want is not None
    side = extract(tiny["map"], tmp_path / "side.gguf", progress=False).paths[0]
    assert np.array_equal(ids_of(side), want)
    head = extract(tiny["map"], tmp_path / "head.gguf", head_only=True, progress=False).paths[0]
    assert np.array_equal(ids_of(head), want)
    assert np.array_equal(ids_of(tiny["head"]), want)  # convert --mtp --head-only --draft-vocab
    assert ids_of(strip(tiny["map"], tmp_path / "trunk.gguf", progress=False).paths[0]) is None
    grafted = graft(tiny["head"], tiny["trunk"], tmp_path / "grafted.gguf", progress=False).paths[0]
    assert np.array_equal(ids_of(grafted), want)
    again = graft(tiny["head"], tiny["trunk"], tmp_path / "g256.gguf", draft_vocab=256, progress=False).paths[0]
    assert len(ids_of(again)) == 256  # type: ignore[arg-type]
    re_side = extract(tiny["map"], tmp_path / "side1k.gguf", draft_vocab=1024, progress=False).paths[0]
    assert ids_of(re_side).tolist() == list(range(1024 - len(SPECIALS))) + SPECIALS  # type: ignore[union-attr]
    q = quantize_model(tiny["map"], tmp_path / "q4.gguf", "Q4_0", allow_requantize=True).path
    assert np.array_equal(ids_of(q), want)  # llama.cpp's quantizer copies the key
    q2 = quantize_model(tiny["full"], tmp_path / "q4-map.gguf", "Q4_0", allow_requantize=True, draft_vocab=768).path
    assert len(ids_of(q2)) == 768  # type: ignore[arg-type]
    assert GGUFModel(q2).tensors.keys() == GGUFModel(tmp_path / "q4.gguf").tensors.keys()  # no tensor added


def _kvs(path: Path) -> list[KV]:
    return GGUFModel(path).model_kvs()


def test_the_default_order_needs_a_bpe_vocabulary_in_merge_order(tiny: dict[str, Path]) -> None:
    kvs = _kvs(tiny["full"])
    assert len(dv.choose(kvs, N, None, "tiny")) == N
    spm = [KV.string(kv.key, "llama") if kv.key == "tokenizer.ggml.model" else kv for kv in kvs]
    with pytest.raises(UnsupportedError, match="count them on a text instead: --draft-vocab-from FILE"):
        dv.choose(spm, N, None, "tiny")
    merges = next(kv for kv in kvs if kv.key == "tokenizer.ggml.merges").scalar()
    merges[10], merges[20] = merges[20], merges[10]
    shuffled = [KV.array(kv.key, GGUFValueType.STRING, merges) if kv.key == "tokenizer.ggml.merges" else kv
                for kv in kvs]
    with pytest.raises(UnsupportedError, match="ids do not follow merge order"):
        dv.choose(shuffled, N, None, "tiny")
    assert len(dv.choose(shuffled, N, TEXT, "tiny")) == N  # a counted text needs no order


def _bad_map_file(tiny: dict[str, Path], tmp_path: Path) -> Path:
    g = RawGGUF.read(tiny["full"])
    return g.set(KV.array(dv.KEY, GGUFValueType.INT32, [5, 3, 9999])).write(tmp_path / "bad-map.gguf")


@pytest.mark.parametrize("case", ["zero", "negative", "over n_vocab", "under the specials", "from without N",
                                  "missing text", "empty text", "not UTF-8", "--no-mtp", "quantize trunk",
                                  "--strip", "bad map in the file", "text too big", "not a number", "overlong number",
                                  "empty FILE", "huge"])
def test_bad_draft_vocab_is_refused_in_one_line(tiny: dict[str, Path], tmp_path: Path, case: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.gguf"
    monkeypatch.setattr(dv, "MAX_TEXT_BYTES", 4096)  # sizes are checked before anything is read
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 ol\xe9\n".encode("latin-1"))
    conv = ["convert", str(TINY), "--outtype", "q8_0", "-o", str(out), "-q"]
    args, want = {
        "zero": (conv + ["--draft-vocab", "0"], "--draft-vocab 0: give a positive number"),
        "negative": (conv + ["--draft-vocab", "-5"], "--draft-vocab -5: give a positive number"),
        "over n_vocab": (conv + ["--draft-vocab", "5000"], "has only 4096 tokens; give at most 4096"),
        "under the specials": (conv + ["--draft-vocab", "3"], "5 control and end-of-generation tokens"),
        "from without N": (conv + ["--draft-vocab-from", str(TEXT)], "--draft-vocab-from needs --draft-vocab N"),
        "missing text": (conv + ["--draft-vocab", "64", "--draft-vocab-from", str(tmp_path / "nope.txt")],
                         "cannot read it"),
        "empty text": (conv + ["--draft-vocab", "64", "--draft-vocab-from", str(tmp_path / "empty.txt")],
                       "the file is empty"),
        "not UTF-8": (conv + ["--draft-vocab", "64", "--draft-vocab-from", str(tmp_path / "latin1.txt")],
                      "not UTF-8 text"),
        "--no-mtp": (conv + ["--no-mtp", "--draft-vocab", "64"], "--draft-vocab is for the MTP head"),
        "quantize trunk": (["quantize", str(tiny["trunk"]), str(out), "Q4_0", "--allow-requantize", "--draft-vocab",
                            "64"], "has no MTP head to give a draft vocabulary"),
        "--strip": (["extract", str(tiny["map"]), "--strip", "-o", str(out), "--draft-vocab", "64"],
                    "--draft-vocab has no effect with --strip"),
        "not a number": (conv + ["--draft-vocab", "abc"], "Invalid value for '--draft-vocab'"),
        "overlong number": (conv + ["--draft-vocab", "9" * 5000], "Invalid value for '--draft-vocab'"),
        "huge": (conv + ["--draft-vocab", "9" * 30], "has only 4096 tokens"),
        "empty FILE": (conv + ["--draft-vocab", "64", "--draft-vocab-from", ""],
                       "Invalid value for '--draft-vocab-from': empty"),
        "text too big": (conv + ["--draft-vocab", "64", "--draft-vocab-from", str(TEXT)],
                         "more than the 4096 bytes this counts; give a sample"),
        "bad map in the file": (["extract", str(_bad_map_file(tiny, tmp_path)), "-o", str(out)],
                                "gguf_mtp.draft_vocab must hold ascending unique token ids below 4096"),
    }[case]
    code, err = cli(*args)
    assert code == 2, err
    lines = [ln for ln in err if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and want in lines[0] and len(lines[0]) < 300, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left


# --- the library ----------------------------------------------------------------------------------------------

def _record_drafts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every token the MTP head drafts that the target checks (the engine's accept hook: by then a draft whose id
    stayed on the device for the verify, patch 0010, has been read)."""
    from gguf_mtp.runtime import speculative

    seen: list[int] = []
    orig = speculative.Engine.accept

    def accept(self, row, drafts):  # type: ignore[no-untyped-def]
        seen.extend(drafts)
        return orig(self, row, drafts)

    monkeypatch.setattr(speculative.Engine, "accept", accept)
    return seen


def _generate(model: Path, mtp: object = "auto", **kw: object) -> tuple[list[list[int]], int, int]:
    gens = []
    with MTPSession(model, mtp=mtp, n_ctx=512, **kw) as s:  # type: ignore[arg-type]
        for p in REF["prompts"][:6]:
            gens.append(s.generate(p, max_tokens=32).tokens)
        return gens, s.stats.drafted, s.stats.accepted


def test_a_map_changes_nothing_in_a_stock_library(tiny: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The file loads and runs everywhere: without the patch (or with it switched off) exactly as without a map,
    bundled and as a head-only sidecar."""
    if PATCHED:
        monkeypatch.setenv("GGUF_MTP_DRAFT_VOCAB", "0")  # the patched library's switch gives the stock behaviour
    plain_head = extract(tiny["full"], tmp_path / "head.gguf", head_only=True, progress=False).paths[0]
    assert ids_of(plain_head) is None
    assert _generate(tiny["map"]) == _generate(tiny["full"])
    assert _generate(tiny["trunk"], tiny["head"]) == _generate(tiny["trunk"], plain_head)


@pytest.mark.parametrize("bad", [[5, 3, 9], [0, 1, 9999], [-1, 2], "floats"])
def test_a_malformed_map_keeps_the_full_head(tiny: dict[str, Path], tmp_path: Path, bad: object) -> None:
    """llama.cpp (stock or patched) loads a file whose map is out of order, out of range or of another type and
    drafts with the full head: the same output and acceptance as without the map."""
    g = RawGGUF.read(tiny["full"])
    kv = (KV.array(dv.KEY, GGUFValueType.FLOAT32, [1.0, 2.0]) if bad == "floats"
          else KV.array(dv.KEY, GGUFValueType.INT32, bad))
    f = g.set(kv).write(tmp_path / "bad.gguf")
    assert _generate(f) == _generate(tiny["full"])


@needs_patch
@pytest.mark.parametrize("pairing", ["bundled", "trunk+head-only", "trunk+self-contained", "bundled+head-only"])
def test_drafts_stay_inside_the_map_and_output_is_plain_decoding(tiny: dict[str, Path], pairing: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """bundled+head-only: a model whose own head has no map, run with a head-only sidecar that has one (--mtp):
    the sidecar's head and map take the bundled head's place."""
    model, mtp = {"bundled": (tiny["map"], "auto"), "trunk+head-only": (tiny["trunk"], tiny["head"]),
                  "trunk+self-contained": (tiny["trunk"], tiny["side"]),
                  "bundled+head-only": (tiny["full"], tiny["head"])}[pairing]
    allowed = set(ids_of(tiny["map"]).tolist())  # type: ignore[union-attr]
    seen = _record_drafts(monkeypatch)

    def action(s: MTPSession) -> list[list[int]]:
        return [s.generate(p, max_tokens=32).tokens for p in REF["prompts"][:6]]

    ref = Reference(lambda: MTPSession(tiny["full"], mtp=False, n_ctx=512), action)
    with MTPSession(model, mtp=mtp, n_ctx=512, n_draft=3) as s:
        got = action(s)
        drafted = s.stats.drafted
    ref.check(got, f"draft vocab {pairing}")
    assert drafted > 0 and len(seen) >= drafted  # every draft went through the hook
    outside = [t for t in seen if t not in allowed]
    assert not outside, f"{len(outside)} of {len(seen)} drafts outside the map: {outside[:8]}"


@needs_patch
def test_without_the_map_drafts_leave_it(tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: the full head does draft outside the N lowest ids on these prompts."""
    allowed = set(ids_of(tiny["map"]).tolist())  # type: ignore[union-attr]
    monkeypatch.setenv("GGUF_MTP_DRAFT_VOCAB", "0")
    seen = _record_drafts(monkeypatch)
    _generate(tiny["map"], n_draft=3)
    assert any(t not in allowed for t in seen)


@needs_patch
def test_qwen35moe_and_synthetic_qwen35_stay_lossless(converted, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for family in ("qwen35", "qwen35moe"):
        src = converted(family, "bundled", **lossless_spec(converted, family))
        m = GGUFModel(src)
        n_vocab = len(m.get("tokenizer.ggml.tokens"))
        req = dv.required_ids(m.get)
        ids = dv.by_rank(max(len(req) + 8, n_vocab // 4), n_vocab, req)
        model = add_draft_head(src, tmp_path / f"{family}-map.gguf", None, draft_vocab=ids, progress=False).paths[0]
        seen = _record_drafts(monkeypatch)

        def action(s: MTPSession) -> list[int]:
            return s.generate("The quick brown fox jumps over the lazy dog and", max_tokens=40).tokens

        ref = Reference(lambda src=src: MTPSession(src, mtp=False, n_ctx=512), action)  # type: ignore[misc]
        with MTPSession(model, mtp="auto", n_ctx=512, n_draft=3) as s:
            got = action(s)
        ref.check(got, f"{family} draft vocab")
        assert seen and set(seen) <= set(ids.tolist()), family
        monkeypatch.undo()


@needs_patch
def test_acceptance_follows_the_map_coverage(tiny: dict[str, Path], tmp_path: Path) -> None:
    """The shipped model at k=1 over all reference prompts. Its 4096-token vocabulary is small and dense (every
    token is common in its Python training text), so acceptance falls with the share of the generated tokens the
    map holds: the measured table is in docs/upstream/draft-vocab.md. A map of the whole vocabulary must
    give the full head's acceptance (the reduced head computes the same logits), and half of it stays close."""
    def acceptance(model: Path) -> float:
        with MTPSession(model, mtp="auto", n_draft=1, n_ctx=512) as s:
            for p in REF["prompts"]:
                s.generate(p, max_tokens=REF["new_tokens"])
            return s.stats.acceptance

    full = acceptance(tiny["full"])
    rows = {}
    for n in (N, 2048, 4096):
        f = add_draft_head(tiny["full"], tmp_path / f"m{n}.gguf", None,
                           draft_vocab=dv.choose(_kvs(tiny["full"]), n, None, "tiny"), progress=False).paths[0]
        rows[n] = acceptance(f)
    print(f"acceptance k=1: full head {full:.3f}; " + ", ".join(f"N={n}: {a:.3f}" for n, a in rows.items()))
    assert abs(rows[4096] - full) <= 0.01  # measured equal on the CPU; a GPU may round the smaller matmul otherwise
    assert full - 0.10 <= rows[2048] <= full + 0.01  # measured -0.070
    assert rows[N] < rows[2048]  # measured 0.502: fewer rows, fewer drafts within reach


def test_start_up_note_for_a_map_the_library_cannot_use(tiny: dict[str, Path]) -> None:
    note = patches.draft_vocab_note(tiny["trunk"], tiny["map"])
    if PATCHED:
        assert note is None
    else:
        assert note is not None and str(tiny["map"]) in note and "full LM head" in note
    assert patches.draft_vocab_note(tiny["full"], None) is None


def test_a_session_says_when_its_library_cannot_use_the_map(tiny: dict[str, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A library without the draft-vocab patch (made so by hiding the marker) gets a start-up note from the
    session itself, so `run`, `serve` and the Python API all say it; with the patch, no note."""
    from gguf_mtp.runtime import MTPSession

    if PATCHED:
        with MTPSession(tiny["map"], n_ctx=256) as s:
            assert not any("draft vocabulary" in n or "full LM head" in n for n in s.notices), s.notices
    monkeypatch.setattr(patches, "names", lambda: [])  # as a stock library answers
    with MTPSession(tiny["map"], n_ctx=256) as s:
        assert any("full LM head" in n for n in s.notices), s.notices
    with MTPSession(tiny["full"], n_ctx=256) as s:
        assert not any("full LM head" in n for n in s.notices), s.notices


def test_the_benchmark_models_carry_a_draft_vocabulary_counted_on_a_text(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/models.py --draft-vocab (bench/gpu.sh shapes with DRAFT_VOCAB): the inflated model with the map carries
    the N tokens most frequent in the text (and every required one), the one without carries none, and
    bench/oneshot.py tells them apart (it adds rows with the map switched off)."""
    import importlib

    models = importlib.import_module("bench.models")
    oneshot = importlib.import_module("bench.oneshot")
    family, widths, _, _, used, noise = models.SHAPES["35b-a3b"]
    monkeypatch.setitem(models.SHAPES, "35b-a3b", (family, widths, 6, 32, used, noise))  # small files
    text = tmp_path / "generated.txt"
    text.write_text(oneshot.PROMPT * 3)
    made = models.shaped(tmp_path, "35b-a3b", vocab=4096, noises=(0.6,), trunks=("q8_0",), threads=2,
                         draft_vocab=N, draft_vocab_text=text)
    plain, mapped = made["35b-a3b Q8_0, noisy head (0.6)"], made[f"35b-a3b Q8_0, noisy head (0.6), draft vocab {N}"]
    assert not oneshot.has_draft_vocab(plain) and oneshot.has_draft_vocab(mapped)
    ids = np.asarray(GGUFModel(mapped).get(dv.KEY))
    assert len(ids) == N and (np.diff(ids) > 0).all()
    tpl = models.template(tmp_path, "35b-a3b", 4096, 2)
    get = GGUFModel(tpl).get
    counts = dv.count_tokens(GGUFModel(tpl).model_kvs(), text, 4096)
    required = dv.required_ids(get)
    assert required <= set(ids.tolist())
    common = [int(i) for i in np.argsort(-counts, kind="stable") if counts[i] > 0][: N - len(required)]
    assert set(common) <= set(ids.tolist())  # the text's most frequent tokens are in it


# --- a draft vocabulary for one session (run / serve --draft-vocab N): the files stay as they are ---------------

def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_patch
@pytest.mark.parametrize("pairing", ["bundled", "trunk+head-only", "trunk+self-contained", "bundled+head-only"])
def test_a_session_draft_vocabulary_needs_no_rewrite(tiny: dict[str, Path], pairing: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``draft_vocab=256``: the head's file is served to llama.cpp with the 256 lowest ids (and the special tokens),
    in place of the 512 its file may name, for every pairing; the drafts come from those only, the output is plain
    decoding's, and no file changes."""
    model, mtp = {"bundled": (tiny["full"], "auto"), "trunk+head-only": (tiny["trunk"], tiny["head"]),
                  "trunk+self-contained": (tiny["trunk"], tiny["side"]),
                  "bundled+head-only": (tiny["map"], tiny["head"])}[pairing]
    files = [p for p in (model, mtp) if isinstance(p, Path)]
    before = [_digest(p) for p in files]
    want = dv.choose(_kvs(tiny["full"]), 256, None, "tiny")
    allowed = set(want.tolist())
    assert len(allowed - set(ids_of(tiny["map"]).tolist())) == 0 < len(set(ids_of(tiny["map"]).tolist()) - allowed)
    seen = _record_drafts(monkeypatch)

    def action(s: MTPSession) -> list[list[int]]:
        return [s.generate(p, max_tokens=32).tokens for p in REF["prompts"][:6]]

    ref = Reference(lambda: MTPSession(tiny["full"], mtp=False, n_ctx=512), action)
    with MTPSession(model, mtp=mtp, n_ctx=512, n_draft=3, draft_vocab=256) as s:
        assert s.draft_vocab is not None and np.array_equal(s.draft_vocab, want)
        got = action(s)
        drafted = s.stats.drafted
    ref.check(got, f"session draft vocab {pairing}")
    assert drafted > 0 and len(seen) >= drafted
    outside = [t for t in seen if t not in allowed]
    assert not outside, f"{len(outside)} of {len(seen)} drafts outside the session's map: {outside[:8]}"
    assert [_digest(p) for p in files] == before  # inputs are never modified


@needs_patch
def test_a_session_draft_vocabulary_counts_a_text(tiny: dict[str, Path]) -> None:
    """``draft_vocab_from``: the session's map is the one the writers would count on that text."""
    with MTPSession(tiny["full"], n_ctx=256, draft_vocab=N, draft_vocab_from=str(TEXT)) as s:
        assert s.draft_vocab is not None
        assert np.array_equal(s.draft_vocab, dv.choose(_kvs(tiny["full"]), N, TEXT, "tiny"))
        assert not np.array_equal(s.draft_vocab, dv.choose(_kvs(tiny["full"]), N, None, "tiny"))


def test_a_session_draft_vocabulary_on_a_library_that_cannot_use_it(tiny: dict[str, Path],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the draft-vocab patch (a stock library, or the marker hidden) the session says so at start-up and
    loads the file as it is (mmap, full head); without a head there is nothing to say."""
    monkeypatch.setattr(patches, "names", lambda: [])
    with MTPSession(tiny["full"], n_ctx=256, draft_vocab=256) as s:
        assert s.draft_vocab is None
        assert any(n.startswith("--draft-vocab 256: ") and "full LM head" in n for n in s.notices), s.notices
        assert s.generate(REF["prompts"][0], max_tokens=8).tokens
    with MTPSession(tiny["full"], mtp=False, n_ctx=256, draft_vocab=256) as s:
        assert not any("draft vocabulary" in n for n in s.notices), s.notices


@pytest.mark.parametrize("args, words", [
    (["--draft-vocab", "0"], "--draft-vocab 0: give a positive number of tokens"),
    (["--draft-vocab", "5000"], "has only 4096 tokens; give at most 4096"),
    (["--draft-vocab-from", "x.txt"], "--draft-vocab-from needs --draft-vocab N"),
    (["--draft-vocab", "256", "--draft-vocab-from", "/nonexistent/words.txt"], "/nonexistent/words.txt"),
])
def test_a_bad_session_draft_vocabulary_is_one_line(tiny: dict[str, Path], args: list[str], words: str) -> None:
    """Refused before the model loads, in one line (with a stock library too): never a fallback to plain
    decoding."""
    code, err = cli("run", str(tiny["full"]), "-p", "hi", "-n", "1", *args)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and words in err[0], err


def test_a_head_without_a_draft_vocabulary_gets_a_hint(tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """With the patch loaded, a large vocabulary and no map anywhere, the session suggests --draft-vocab (the tiny
    model's 4,096 tokens pass for large here); with a map in the file or the session's own, or a stock library,
    nothing is suggested."""
    assert (patches.draft_vocab_hint("qwen35", 248320, False) is not None) == PATCHED
    assert patches.draft_vocab_hint("qwen35", 248320, True) is None
    assert patches.draft_vocab_hint("qwen35", 32000, False) is None
    assert patches.draft_vocab_hint("glm4moe", 248320, False) is None
    monkeypatch.setattr(patches, "SUGGEST_DRAFT_VOCAB_ABOVE", 1000)

    def hinted(model: Path, mtp: object = "auto", **kw: object) -> bool:
        with MTPSession(model, mtp=mtp, n_ctx=256, **kw) as s:  # type: ignore[arg-type]
            return any("--draft-vocab 32768" in n for n in s.notices)

    assert hinted(tiny["full"]) == PATCHED
    assert not hinted(tiny["map"]) and not hinted(tiny["trunk"], tiny["head"]) and not hinted(tiny["full"], False)
    if PATCHED:
        assert not hinted(tiny["full"], draft_vocab=256)


@needs_patch
def test_a_session_draft_vocabulary_where_no_file_can_be_served(tiny: dict[str, Path],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Without glibc's fopencookie (another C library) the map cannot be served: a note, and the bundled head
    runs as it is (not plain decoding, as a head that failed to load would)."""
    from gguf_mtp.runtime import virtual

    monkeypatch.setattr(virtual, "unavailable", lambda: "this C library has no fopencookie (glibc)")
    with MTPSession(tiny["full"], n_ctx=256, draft_vocab=256) as s:
        assert s.draft_vocab is None and s.mtp_enabled
        assert any(n.startswith("--draft-vocab 256: cannot serve the file") for n in s.notices), s.notices


@needs_patch
def test_a_session_draft_vocabulary_for_an_arch_whose_graph_has_none(converted) -> None:  # type: ignore[no-untyped-def]
    """qwen3next's MTP graph reads no draft vocabulary in the patched library: the session says so and loads the
    file as it is, rather than serving a map nothing reads (and losing mmap for it)."""
    model = converted("qwen3next", "bundled")
    with MTPSession(model, n_ctx=256, draft_vocab=64, draft_vocab_from=str(TEXT)) as s:
        assert s.draft_vocab is None and s.mtp_enabled
        assert any("qwen3next's MTP graph reads no draft vocabulary" in n for n in s.notices), s.notices
