"""GGUF metadata and tensor types are checked in one place before anything is read from them or handed to
llama.cpp: wrong-typed or out-of-range keys, per-layer arrays, overlapping tensor data, head tensors of a type
their op cannot use, and a sidecar given as the model. Each case is refused with one line naming the file and
the key or tensor, by every command, and the inputs keep their bytes. The llama.cpp cases show the crash our
check prevents (in a subprocess), so the rule is known to be real."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType, GGUFValueType

from gguf_mtp import inspect_file, surgery
from gguf_mtp.errors import FormatError, GgufMtpError, UnsupportedError
from gguf_mtp.ggufio.format import KV
from gguf_mtp.layout import detect
from gguf_mtp.quantize import quantize_model
from gguf_mtp.runtime.pairing import resolve
from gguf_mtp_cli.main import main
from tests.gguf_mutate import RawGGUF

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: runs `run` on each bad file

V, T = GGUFValueType, GGMLQuantizationType


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def files(converted) -> dict[str, Path]:
    return {"bundled": converted("qwen35", "bundled"), "trunk": converted("qwen35", "trunk-only"),
            "sidecar": converted("qwen35", "mtp-only"), "head": converted("qwen35", "head-only")}


def every_op(bad: Path, files: dict[str, Path], tmp: Path) -> list[tuple[str, BaseException | None]]:
    """Run every command that reads ``bad`` (as a model, a source and a target); returns what each raised."""
    ops = {
        "inspect": lambda: inspect_file(bad),
        "extract": lambda: surgery.extract(bad, tmp / "x.gguf", progress=False, force=True),
        "extract-head-only": lambda: surgery.extract(bad, tmp / "h.gguf", head_only=True, progress=False, force=True),
        "strip": lambda: surgery.strip(bad, tmp / "s.gguf", progress=False, force=True),
        "graft-source": lambda: surgery.graft(bad, files["trunk"], tmp / "g.gguf", progress=False, force=True),
        "graft-target": lambda: surgery.graft(files["sidecar"], bad, tmp / "t.gguf", progress=False, force=True),
        "pairing": lambda: resolve(bad),
        "pairing-sidecar": lambda: resolve(files["trunk"], bad),
        "quantize": lambda: quantize_model(bad, tmp / "q.gguf", "Q8_0", force=True),
    }
    out = []
    for name, op in ops.items():
        try:
            op()
            out.append((name, None))
        except GgufMtpError as e:
            out.append((name, e))
    return out


BAD_METADATA = [
    # (description, edit, key named in the message)
    ("block_count as a string", lambda g: g.set(KV.string(g.key("block_count"), "9")), "block_count"),
    ("block_count as NaN", lambda g: g.set(KV.f32(g.key("block_count"), float("nan"))), "block_count"),
    ("block_count as an array", lambda g: g.set(KV.array(g.key("block_count"), V.UINT32, [9])), "block_count"),
    ("block_count 0", lambda g: g.set(KV.u32(g.key("block_count"), 0)), "block_count"),
    ("block_count above llama.cpp's 512", lambda g: g.set(KV.u32(g.key("block_count"), 513)), "block_count"),
    ("block_count as i32", lambda g: g.set(KV.i32(g.key("block_count"), 9)), "block_count"),
    ("nextn above block_count", lambda g: g.set(KV.u32(g.key("nextn_predict_layers"), 10)), "nextn_predict_layers"),
    ("nextn 1e9", lambda g: g.set(KV.u32(g.key("nextn_predict_layers"), 10**9)), "nextn_predict_layers"),
    ("nextn as a string", lambda g: g.set(KV.string(g.key("nextn_predict_layers"), "1")), "nextn_predict_layers"),
    ("embedding_length 0", lambda g: g.set(KV.u32(g.key("embedding_length"), 0)), "embedding_length"),
    ("rms eps as a string", lambda g: g.set(KV.string(g.key("attention.layer_norm_rms_epsilon"), "1e-6")),
     "layer_norm_rms_epsilon"),
    ("rms eps NaN", lambda g: g.set(KV.f32(g.key("attention.layer_norm_rms_epsilon"), float("nan"))),
     "layer_norm_rms_epsilon"),
    ("rope base as a string", lambda g: g.set(KV.string(g.key("rope.freq_base"), "1e6")), "rope.freq_base"),
    ("rope base negative", lambda g: g.set(KV.f32(g.key("rope.freq_base"), -1.0)), "rope.freq_base"),
    ("per-layer array too short", lambda g: g.set(KV.array(g.key("attention.recurrent_layers"), V.BOOL, [True] * 3)),
     "recurrent_layers"),
    ("per-layer array of strings", lambda g: g.set(KV.array(g.key("attention.head_count_kv"), V.STRING, ["2"] * 9)),
     "head_count_kv"),
    ("expert_count above 1024", lambda g: g.set(KV.u32(g.key("expert_count"), 2048)), "expert_count"),
    ("experts used without experts", lambda g: g.set(KV.u32(g.key("expert_used_count"), 2)), "expert_used_count"),
    ("unknown rope scaling", lambda g: g.set(KV.string(g.key("rope.scaling.type"), "magic")), "rope.scaling.type"),
    ("chat template not text", lambda g: g.set(KV.array("tokenizer.chat_template", V.INT32, [1, 2])),
     "tokenizer.chat_template"),
    ("token list of numbers", lambda g: g.set(KV.array("tokenizer.ggml.tokens", V.INT32, [1, 2])),
     "tokenizer.ggml.tokens"),
]


@pytest.mark.parametrize("desc,edit,key", BAD_METADATA, ids=[c[0] for c in BAD_METADATA])
def test_bad_metadata_is_refused_everywhere(files, tmp_path: Path, desc: str, edit, key: str) -> None:
    bad = edit(RawGGUF.read(files["bundled"])).write(tmp_path / "bad.gguf")
    before = digest(bad)
    for op, err in every_op(bad, files, tmp_path):
        assert isinstance(err, FormatError), f"{op} accepted {desc}"
        msg = str(err)
        assert str(bad) in msg and key in msg and "\n" not in msg, (op, msg)
    assert digest(bad) == before
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "s.gguf").exists()


def test_cli_bad_metadata_is_one_line(files, tmp_path: Path, capsys) -> None:
    bad = RawGGUF.read(files["bundled"]).set(KV.u32("qwen35.nextn_predict_layers", 10)).write(tmp_path / "b.gguf")
    for argv in (["inspect", str(bad)], ["extract", str(bad), "-o", str(tmp_path / "o.gguf")],
                 ["extract", str(bad), "--strip", "-o", str(tmp_path / "o.gguf")],
                 ["run", str(bad), "-p", "hi", "-n", "1"],
                 ["quantize", str(bad), str(tmp_path / "q.gguf"), "Q4_0"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and "nextn_predict_layers" in err[0], (argv, err)
    assert [p.name for p in tmp_path.iterdir()] == ["b.gguf"]  # nothing written beside the input


def test_valid_files_pass(files) -> None:
    """The checks are silent on what we write: every layout opens and pairs."""
    for p in files.values():
        inspect_file(p)
    assert resolve(files["bundled"]).source.value == "bundled"
    assert resolve(files["trunk"], files["head"]).source.value == "head-only sidecar"


def test_detect_refuses_raw_values() -> None:
    with pytest.raises(FormatError, match="qwen35.block_count is '9'"):
        detect({"general.architecture": "qwen35", "qwen35.block_count": "9"}, [])
    with pytest.raises(FormatError, match="more than block_count"):
        detect({"general.architecture": "qwen35", "qwen35.block_count": 2, "qwen35.nextn_predict_layers": 3}, [])


def test_overlapping_tensor_data_is_refused(files, tmp_path: Path) -> None:
    """Two tensors sharing bytes: llama.cpp refuses the file, and strip must not turn it into one that loads."""
    raw = bytearray(files["bundled"].read_bytes())
    g = RawGGUF.read(files["bundled"])
    second = g.tensors[1].name.encode()
    i = raw.index(second) + len(second)
    nd = int.from_bytes(raw[i:i + 4], "little")
    off = i + 4 + 8 * nd + 4
    raw[off:off + 8] = (0).to_bytes(8, "little")  # the second tensor's data starts where the first's does
    bad = tmp_path / "overlap.gguf"
    bad.write_bytes(bytes(raw))
    for op, err in every_op(bad, files, tmp_path):
        assert isinstance(err, FormatError) and "overlaps" in str(err), (op, err)
    assert not (tmp_path / "s.gguf").exists()


def test_head_tensor_of_the_wrong_type_is_refused(files, tmp_path: Path) -> None:
    g = RawGGUF.read(files["bundled"])
    enorm = next(t.name for t in g.tensors if t.name.endswith("nextn.enorm.weight"))
    bad = g.retype(enorm, T.Q8_0).write(tmp_path / "q8-norm.gguf")
    side = RawGGUF.read(files["sidecar"]).retype(enorm, T.Q8_0).write(tmp_path / "q8-norm-MTP.gguf")
    for fn in (lambda: surgery.extract(bad, tmp_path / "x.gguf", progress=False),
               lambda: surgery.graft(bad, files["trunk"], tmp_path / "g.gguf", progress=False),
               lambda: surgery.graft(side, files["trunk"], tmp_path / "g.gguf", progress=False),
               lambda: resolve(bad), lambda: resolve(files["trunk"], side)):
        with pytest.raises(UnsupportedError, match=rf"tensor '{enorm}' is Q8_0, but llama.cpp .* needs F32"):
            fn()
    surgery.strip(bad, tmp_path / "s.gguf", progress=False)  # dropping the broken head is the way out
    # a matrix may be any quantized type, but not an integer one
    ok = RawGGUF.read(files["bundled"])
    eh = next(t.name for t in ok.tensors if t.name.endswith("nextn.eh_proj.weight"))
    resolve(ok.retype(eh, T.Q4_0).write(tmp_path / "q4.gguf"))
    with pytest.raises(UnsupportedError, match="cannot use as a weight matrix"):
        resolve(RawGGUF.read(files["bundled"]).retype(eh, T.I32).write(tmp_path / "i32.gguf"))


def test_sidecar_as_the_model_is_refused_with_the_fix(files, capsys) -> None:
    for key, what in (("sidecar", "self-contained"), ("head", "head-only")):
        for argv in (["run", str(files[key]), "-p", "hi", "-n", "1"],
                     ["run", str(files[key]), "--no-mtp", "-p", "hi", "-n", "1"]):
            assert main(argv) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1, err
            assert f"is a {what} MTP sidecar" in err[0] and f"gguf-mtp run MODEL.gguf --mtp {files[key]}" in err[0]


GRAPH_NEEDS = [
    ("blk.0.attn_gate.weight", "block 0 has no attn_qkv.weight + attn_gate.weight"),
    ("blk.0.attn_norm.weight", "block 0 has no attn_norm.weight, but other trunk tensors"),
    ("nextn.eh_proj.weight", "has no nextn.eh_proj.weight, but the file has MTP tensors"),
]


@pytest.mark.parametrize("name,words", GRAPH_NEEDS, ids=[n for n, _ in GRAPH_NEEDS])
def test_tensors_llama_cpp_leaves_optional_but_needs(files, tmp_path: Path, name: str, words: str) -> None:
    g = RawGGUF.read(files["bundled"])
    name = next(t.name for t in g.tensors if t.name.endswith(name))
    g.tensors = [t for t in g.tensors if t.name != name]
    bad = g.write(tmp_path / "bad.gguf")
    for op, err in every_op(bad, files, tmp_path):
        assert isinstance(err, FormatError) and words in str(err), (op, err)


def test_multi_head_files(converted, tmp_path: Path) -> None:
    """step35 (found by the fuzzer): a pattern without sliding-window layers, more declared heads than present."""
    side = RawGGUF.read(converted("step35", "mtp-only"))
    n = len(next(kv for kv in side.kvs if kv.key.endswith("sliding_window_pattern")).value)
    bad = side.copy().set(KV.array("step35.attention.sliding_window_pattern", V.BOOL, [False] * n))
    with pytest.raises(FormatError, match="marks no layer as sliding-window"):
        resolve(converted("step35", "trunk-only"), bad.write(tmp_path / "swa.gguf"))
    head = RawGGUF.read(converted("step35", "head-only"))
    more = head.set(KV.u32("step35.nextn_predict_layers", 7)).write(tmp_path / "seven.gguf")
    with pytest.raises(FormatError, match="declares 7 MTP layers"):
        surgery.graft(more, converted("step35", "trunk-only"), tmp_path / "g.gguf", progress=False)


# -- what llama.cpp does without these checks ---------------------------------------------------
LOAD = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})  # the repo root: tests.helpers
    from gguf_mtp.runtime.llama import Context, Model
    from tests import helpers
    m = Model(sys.argv[1], load_mtp=True)
    with Context(m, n_ctx=64, n_batch=8) as ctx, Context(m, n_ctx=64, n_batch=8, mtp=True) as mctx:
        helpers.decode(ctx, m.tokenize("hello"), 0)
        helpers.decode(mctx, [1], 0)
    print("survived")
""")


@pytest.mark.parametrize("case", ["nextn above block_count", "block_count 0", "enorm as Q8_0", "no attn_gate",
                                  "step35 without sliding-window layers"])
def test_llama_cpp_crashes_on_what_we_refuse(files, converted, tmp_path: Path, case: str) -> None:
    g = RawGGUF.read(converted("step35", "bundled") if case.startswith("step35") else files["bundled"])
    if case == "nextn above block_count":
        g.set(KV.u32(g.key("nextn_predict_layers"), 10))
    elif case == "block_count 0":
        g.set(KV.u32(g.key("block_count"), 0))
    elif case.startswith("step35"):
        swa = next(kv for kv in g.kvs if kv.key.endswith("sliding_window_pattern"))
        g.set(KV.array(swa.key, V.BOOL, [False] * len(swa.value)))
    elif case == "enorm as Q8_0":
        g.retype(next(t.name for t in g.tensors if t.name.endswith("nextn.enorm.weight")), T.Q8_0)
    else:
        g.tensors = [t for t in g.tensors if t.name != "blk.0.attn_gate.weight"]
    bad = g.write(tmp_path / "bad.gguf")
    r = subprocess.run([sys.executable, "-c", LOAD, str(bad)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "GGML_NO_BACKTRACE": "1"})  # no gdb attach on abort
    assert r.returncode < 0, f"llama.cpp did not crash on {case} (rc {r.returncode}); the check may be obsolete"
    with pytest.raises(GgufMtpError):
        resolve(bad)


def test_graft_beyond_llama_cpps_layer_limit(files, tmp_path: Path) -> None:
    g = RawGGUF.read(files["trunk"])
    g.set(KV.u32(g.key("block_count"), 512))
    g.set(KV.array(g.key("attention.recurrent_layers"), V.BOOL, [i % 4 != 3 for i in range(512)]))
    target = g.write(tmp_path / "deep.gguf")
    with pytest.raises(UnsupportedError, match="make 513 blocks, more than llama.cpp's 512"):
        surgery.graft(files["sidecar"], target, tmp_path / "o.gguf", progress=False)


@pytest.mark.parametrize("key,value", [("full_attention_interval", 1000), ("attention.recurrent_layers", None)])
def test_a_trunk_without_attention_is_refused(files, tmp_path: Path, key: str, value: int | None) -> None:
    """A Qwen hybrid whose every trunk block is recurrent: llama.cpp cannot allocate its empty KV cache and aborts
    the process (GGML_ASSERT in ggml-backend), at --no-mtp too. It is refused before llama.cpp sees it."""
    g = RawGGUF.read(files["bundled"])
    n = int(next(kv.value for kv in g.kvs if kv.key == g.key("block_count")))
    kv = (KV.u32(g.key(key), value) if value is not None
          else KV.array(g.key(key), GGUFValueType.BOOL, [True] * (n - 1) + [False]))  # only the MTP block attends
    if value is not None:  # the interval counts only where the file has no per-layer array
        g.drop(g.key("attention.recurrent_layers"))
    bad = g.set(kv).write(tmp_path / "no-attention.gguf")
    for op, err in every_op(bad, files, tmp_path):
        assert isinstance(err, FormatError) and "none of the" in str(err) and "llama.cpp aborts" in str(err), (op, err)
    r = subprocess.run([sys.executable, "-m", "gguf_mtp_cli.main", "run", str(bad), "--no-mtp", "-p", "x", "-n", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "none of the" in r.stderr, r.stderr[-500:]
