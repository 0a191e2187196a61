"""``--mtp-type`` below Q8_0 (q5_1, q5_0, q4_1, q4_0): the MTP block's matrices at a legacy block type, read by the
drafts only. Run on the shipped trained model with the real llama.cpp: output must equal plain decoding, acceptance
must stay close to the Q8_0 block's, the trunk is left as it is, and every other path (extract to a sidecar, a
graft) writes the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf_mtp_cli.main import main

from gguf_mtp import convert
from gguf_mtp.errors import UnsupportedError
from gguf_mtp.ggml_types import MTP_TYPES
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.surgery import extract, graft
from tests.lossless import References
from tests.test_draft_head import TINY, plain_refs, run

BLOCK = "blk.8."  # the tiny model's one MTP layer follows 8 trunk layers
MATRICES = ["nextn.eh_proj", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mtptypes")
    return {t: convert(TINY, outfile=d / f"tiny-{t}.gguf", mtp_type=t, progress=False).path
            for t in ("q8_0", "q5_0", "q4_0")}


def types(path: Path) -> dict[str, str]:
    return {n: t.info.type_name for n, t in GGUFModel(path).tensors.items()}


def test_the_block_takes_the_type_and_the_trunk_stays(files: dict[str, Path]) -> None:
    base = GGUFModel(files["q8_0"])
    for t in ("q5_0", "q4_0"):
        m, got = GGUFModel(files[t]), types(files[t])
        assert {got[f"{BLOCK}{n}.weight"] for n in MATRICES} == {t.upper()}
        assert all(got[n] == "F32" for n in got if n.startswith(BLOCK) and "norm" in n)
        trunk = [n for n in base.tensors if not n.startswith(BLOCK)]
        assert trunk and all(m.tensors[n].file.read_tensor_bytes(n) == base.tensors[n].file.read_tensor_bytes(n)
                             for n in trunk)
        assert m.path.stat().st_size < base.path.stat().st_size


def test_a_4_and_5_bit_block_keeps_output_and_acceptance(files: dict[str, Path]) -> None:
    """Greedy output is plain decoding's (the target verifies every draft), and the head's acceptance on the
    reference prompts stays within 5 points of the Q8_0 block's at k=1 and k=3 (a stated tolerance: near-ties in the
    head's argmax fall one way or the other with the CPU's kernels). Measured on the CPU this was written on, over
    the 16 prompts, Q8_0 / Q5_0 / Q4_0: k=1 0.748 / 0.744 / 0.726; k=3 0.447 / 0.451 / 0.438."""
    plain = plain_refs(files["q8_0"])
    for k in (1, 3):
        acc = {}
        for t, f in files.items():
            acc[t], gens = run(f, n_draft=k)
            plain.check(gens, f"MTP block {t}, k={k}")
        print(f"k={k}: acceptance by MTP block type {acc}")
        assert acc["q8_0"] > 0.3
        assert all(abs(a - acc["q8_0"]) <= 0.05 for a in acc.values()), acc


def test_extract_and_graft_write_the_block_at_the_type(files: dict[str, Path], tmp_path: Path) -> None:
    """A head-only sidecar extracted with --mtp-type q4_0 from the Q8_0 model, and the head grafted onto the trunk
    with --mtp-type q5_0, hold the block at that type; the sidecar pairs with the trunk and runs losslessly."""
    side = extract(files["q8_0"], tmp_path / "side.gguf", head_only=True, mtp_type="q4_0", progress=False).paths[0]
    got = types(side)
    assert {got[f"{BLOCK}{n}.weight"] for n in MATRICES} == {"Q4_0"}
    trunk = convert(TINY, outfile=tmp_path / "trunk.gguf", layout="trunk-only", progress=False).path
    grafted = graft(files["q8_0"], trunk, tmp_path / "g.gguf", mtp_type="q5_0", progress=False).paths[0]
    assert {types(grafted)[f"{BLOCK}{n}.weight"] for n in MATRICES} == {"Q5_0"}
    want = plain_refs(trunk, prompts=4)
    acc, gens = run(trunk, mtp=side, prompts=4)
    want.check(gens, "trunk + Q4_0 head-only sidecar")
    assert acc > 0.3


def test_a_type_the_block_cannot_take_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnsupportedError, match=r"--mtp-type 'q4_k' is not supported; choose one of "
                                               + ", ".join(MTP_TYPES)):
        convert(TINY, outfile=tmp_path / "x.gguf", mtp_type="q4_k", progress=False)
    assert main(["convert", str(TINY), "-o", str(tmp_path / "y.gguf"), "--mtp-type", "q2_k"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "q4_0" in err[0], err
    assert not list(tmp_path.iterdir())


def test_a_head_llama_cpps_converter_wrote_at_q4_0(tmp_path: Path) -> None:
    """The same on a file llama.cpp's own converter wrote (tests/data/ref/qwen35.gguf): its head grafted back onto
    its stripped trunk with --mtp-type q4_0 has the block at Q4_0 under llama.cpp's names, and runs losslessly
    against plain decoding of the trunk (its random head's acceptance says nothing, so only output is compared)."""
    from gguf_mtp.runtime import MTPSession
    from gguf_mtp.surgery import strip

    ref = Path(__file__).parent / "data" / "ref" / "qwen35.gguf"
    trunk = strip(ref, tmp_path / "trunk.gguf", progress=False).paths[0]
    grafted = graft(ref, trunk, tmp_path / "q4.gguf", mtp_type="q4_0", progress=False).paths[0]
    n_trunk = int(GGUFModel(trunk).arch_get("{arch}.block_count"))
    got = types(grafted)
    block = {n: t for n, t in got.items() if n.startswith(f"blk.{n_trunk}.") and n.endswith(".weight")}
    assert block and all(t in ("Q4_0", "F32") for t in block.values()) and "Q4_0" in block.values(), block
    assert {n: t for n, t in got.items() if n not in block} == types(trunk)
    prompts = ["Hello world", "The quick brown fox", "1 2 3 4 5"]
    actions = [lambda s, p=p: s.generate(p, max_tokens=24).tokens for p in prompts]
    plain = References(lambda: MTPSession(trunk, mtp=False, n_ctx=256), actions)
    with MTPSession(grafted, n_ctx=256, n_draft=2) as s:
        assert s.engine.mtp is not None
        plain.check([a(s) for a in actions], "llama.cpp-converted head at Q4_0")  # equal up to a stated tie rule
