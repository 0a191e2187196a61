"""extract / strip / graft: byte-exact round trips, llama.cpp loads every output, grafted models decode like
the original, grafts onto llama.cpp-quantized trunks, split sets, and compatibility refusals."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gguf_mtp import inspect_file, surgery
from gguf_mtp.errors import CompatibilityError, FormatError, GgufMtpError, MissingTensorError, OutputExistsError
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.layout import Layout
from gguf_mtp.runtime.llama import Context, Model
from gguf_mtp.quantize import llama_quantize as quantize

from .conftest import FAMILIES
from tests import helpers

PROMPT = "The quick brown fox jumps over the lazy dog."


def same_model(a_path: Path, b_path: Path) -> None:
    """Tensors byte-for-byte and metadata up to key order (split keys aside)."""
    a, b = GGUFModel(a_path), GGUFModel(b_path)
    assert set(a.tensors) == set(b.tensors)
    for name, t in a.tensors.items():
        u = b.tensors[name]
        assert (t.info.shape, t.info.ggml_type) == (u.info.shape, u.info.ggml_type), name
        assert t.file.read_tensor_bytes(name) == u.file.read_tensor_bytes(name), name
    ka = {k: v for k, v in a.kv.items() if not k.startswith("split.")}
    kb = {k: v for k, v in b.kv.items() if not k.startswith("split.")}
    assert ka.keys() == kb.keys()
    for k in ka:
        assert helpers.same_value(ka[k], kb[k]), k


def greedy(path: Path, n: int = 16) -> list[int]:
    with Model(path, load_mtp=True) as m, Context(m) as ctx:
        return helpers.greedy(ctx, m.tokenize(PROMPT), n)


def digest(paths: list[Path]) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("head_only", [False, True])
def test_round_trip_single_file(converted, tmp_path: Path, family: str, head_only: bool) -> None:
    x = converted(family, "bundled")
    before = digest([x])
    side = surgery.extract(x, tmp_path / "side.gguf", head_only=head_only, progress=False).paths[0]
    trunk = surgery.strip(x, tmp_path / "trunk.gguf", progress=False).paths[0]
    back = surgery.graft(side, trunk, tmp_path / "back.gguf", progress=False).paths[0]
    same_model(x, back)
    assert digest([x]) == before  # inputs never modified
    assert inspect_file(side).layout == (Layout.HEAD_ONLY if head_only else Layout.MTP_ONLY)
    assert inspect_file(trunk).layout == Layout.TRUNK_ONLY
    # every output loads in llama.cpp; the grafted model decodes exactly like the original
    assert greedy(back) == greedy(x) == greedy(trunk)
    with Model(back, load_mtp=True) as m, Context(m, mtp=True):
        pass
    if not head_only:
        with Model(side, load_mtp=True) as m, Context(m, mtp=True):
            pass


@pytest.mark.parametrize("family", ["qwen35", "qwen35moe"])
def test_converted_layouts_round_trip_with_convert(converted, tmp_path: Path, family: str) -> None:
    """graft(convert --no-mtp, convert --mtp) == convert (bundled), for both sidecar flavours."""
    for layout in ("mtp-only", "head-only"):
        out = surgery.graft(converted(family, layout), converted(family, "trunk-only"), tmp_path / f"{layout}.gguf",
                            progress=False).paths[0]
        same_model(converted(family, "bundled"), out)
    side = surgery.extract(converted(family, "mtp-only"), tmp_path / "h.gguf", head_only=True, progress=False)
    same_model(converted(family, "head-only"), side.paths[0])


@pytest.mark.parametrize("family", ["qwen35", "qwen35moe"])
def test_split_sets(converted, tmp_path: Path, family: str) -> None:
    x = converted(family, "bundled")
    parts = helpers.reshard(x, tmp_path / "x.gguf", shards=3)
    assert [p.name for p in parts] == [f"x-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    same_model(x, parts[0])
    assert greedy(parts[0]) == greedy(x)
    side = surgery.extract(parts[1], tmp_path / "side.gguf", progress=False).paths[0]   # any shard names the set
    trunk = surgery.strip(parts[0], tmp_path / "trunk.gguf", progress=False).paths
    assert len(trunk) >= 2 and all(p.exists() for p in trunk)
    back = surgery.graft(side, trunk[0], tmp_path / "back.gguf", progress=False).paths
    assert len(back) == len(trunk) and back[0].name.startswith("back-00001-of-")
    same_model(x, back[0])
    m = GGUFModel(back[0])
    assert m.get("split.tensors.count") == len(m.tensors)
    assert all(s.get("split.count") == len(back) for s in m.shards)
    assert greedy(back[0]) == greedy(x)


def test_extract_reads_only_what_it_writes(converted, tmp_path: Path) -> None:
    x = converted("qwen35", "bundled")
    r = surgery.extract(x, tmp_path / "h.gguf", head_only=True, progress=False)
    head = surgery.find_head(GGUFModel(x))
    assert head is not None
    header = GGUFModel(x).shards[0].data_offset
    assert r.bytes_read == header + head.nbytes
    assert r.bytes_read < x.stat().st_size / 3


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_K_M"])
def test_graft_onto_llama_cpp_quantized_trunk(converted, tmp_path: Path, qtype: str) -> None:
    kw = {"hidden": 256, "intermediate": 512} if qtype == "Q4_K_M" else {}
    trunk_f16 = converted("qwen35", "trunk-only", "f16", **kw)
    target = quantize(trunk_f16, tmp_path / f"t-{qtype}.gguf", qtype)
    before = digest([target])
    out = surgery.graft(converted("qwen35", "mtp-only", **kw), target, tmp_path / "g.gguf", progress=False).paths[0]
    rep = inspect_file(out)
    assert rep.layout == Layout.BUNDLED and rep.file_type == qtype
    assert {t.type for t in rep.mtp_tensors if len(t.shape) == 2} == {"Q8_0"}
    assert GGUFModel(out).get("general.file_type") == GGUFModel(target).get("general.file_type")
    assert len(greedy(out, 8)) >= 1
    with Model(out, load_mtp=True) as m, Context(m, mtp=True):
        pass
    assert digest([target]) == before


def test_mtp_type_requantizes_the_head(converted, tmp_path: Path) -> None:
    src = converted("qwen35", "bundled", "bf16", mtp_type="bf16")
    out = surgery.graft(src, converted("qwen35", "trunk-only"), tmp_path / "g.gguf", mtp_type="q8_0",
                        progress=False).paths[0]
    types = {t.name: t.type for t in inspect_file(out).mtp_tensors}
    assert types["blk.4.attn_q.weight"] == "Q8_0" and types["blk.4.nextn.enorm.weight"] == "F32"
    side = surgery.extract(src, tmp_path / "s.gguf", mtp_type="q8_0", progress=False).paths[0]
    assert {t.type for t in inspect_file(side).mtp_tensors if len(t.shape) == 2} == {"Q8_0"}


def test_replace_an_existing_head(converted, tmp_path: Path) -> None:
    x = converted("qwen35", "bundled")
    with pytest.raises(GgufMtpError, match="already has an MTP head .* --replace"):
        surgery.graft(converted("qwen35", "mtp-only"), x, tmp_path / "g.gguf", progress=False)
    out = surgery.graft(converted("qwen35", "mtp-only"), x, tmp_path / "g.gguf", replace=True, progress=False)
    same_model(x, out.paths[0])


def test_head_is_renumbered_to_follow_the_target(converted, tmp_path: Path) -> None:
    """A head from an 8-layer model onto a 4-layer trunk of the same widths lands at blk.4."""
    side = converted("qwen35", "mtp-only", layers=8)
    out = surgery.graft(side, converted("qwen35", "trunk-only"), tmp_path / "g.gguf", progress=False)
    assert any("renumbered from blk.8 to blk.4" in n for n in out.notes)
    names = set(GGUFModel(out.paths[0]).tensors)
    assert "blk.4.nextn.eh_proj.weight" in names and not any(n.startswith("blk.8.") for n in names)
    assert len(greedy(out.paths[0], 4)) >= 1


@pytest.mark.parametrize("kw,needle", [
    ({"experts": 8}, r"expert_count 4 \(target\) vs 8 \(head\)"),
    ({"hidden": 128}, r"embedding_length 64 \(target\) vs 128 \(head\)"),
    ({"vocab_size": 640}, r"vocabulary 512 tokens \(target\) vs 640 \(head\)"),
])
def test_mismatched_models_are_refused(converted, tmp_path: Path, kw: dict, needle: str) -> None:
    with pytest.raises(CompatibilityError, match=needle):
        surgery.graft(converted("qwen35moe", "mtp-only", **kw), converted("qwen35moe", "trunk-only"),
                      tmp_path / "g.gguf", progress=False)
    assert not list(tmp_path.iterdir())


def test_other_architecture_and_token_list(converted, tmp_path: Path) -> None:
    with pytest.raises(CompatibilityError, match="'qwen35' but .* is 'qwen35moe'"):
        surgery.graft(converted("qwen35", "mtp-only"), converted("qwen35moe", "trunk-only"), tmp_path / "g.gguf",
                      progress=False)


def test_bad_inputs(converted, tmp_path: Path) -> None:
    x = converted("qwen35", "bundled")
    trunk = converted("qwen35", "trunk-only")
    with pytest.raises(MissingTensorError, match="SOURCE has no MTP head"):
        surgery.extract(trunk, tmp_path / "a.gguf", progress=False)
    with pytest.raises(MissingTensorError, match="SOURCE has no MTP head"):
        surgery.graft(trunk, trunk, tmp_path / "a.gguf", progress=False)
    with pytest.raises(GgufMtpError, match="TARGET is an MTP sidecar"):
        surgery.graft(x, converted("qwen35", "head-only"), tmp_path / "a.gguf", progress=False)
    with pytest.raises(MissingTensorError, match="has no token_embd.weight .* --head-only"):
        surgery.extract(converted("qwen35", "head-only"), tmp_path / "a.gguf", progress=False)
    with pytest.raises(GgufMtpError, match="is an MTP sidecar, not a model"):
        surgery.strip(converted("qwen35", "mtp-only"), tmp_path / "a.gguf", progress=False)
    bad = tmp_path / "trunc.gguf"
    bad.write_bytes(x.read_bytes()[:-100])
    with pytest.raises(FormatError, match="truncated"):
        surgery.extract(bad, tmp_path / "a.gguf", progress=False)
    out = tmp_path / "exists.gguf"
    out.write_bytes(b"old")
    with pytest.raises(OutputExistsError, match="--force"):
        surgery.extract(x, out, progress=False)
    assert out.read_bytes() == b"old"
    parts = helpers.reshard(x, tmp_path / "s.gguf", shards=3)
    parts[2].unlink()
    with pytest.raises(FormatError, match=r"s-00003-of-00003\.gguf: shard 3 of 3 is missing"):
        surgery.strip(parts[0], tmp_path / "b.gguf", progress=False)
    assert not list(tmp_path.glob("*.partial")) and not (tmp_path / "a.gguf").exists()


def test_cli_extract_modes(converted, tmp_path: Path, capsys) -> None:
    from gguf_mtp_cli.main import main

    x = str(converted("qwen35", "bundled"))
    assert main(["extract", x, "-o", str(tmp_path / "s.gguf"), "-q"]) == 0
    assert main(["extract", x, "--strip", "-o", str(tmp_path / "t.gguf"), "-q"]) == 0
    assert main(["extract", str(tmp_path / "s.gguf"), "--onto", str(tmp_path / "t.gguf"), "-o",
                 str(tmp_path / "g.gguf"), "-q"]) == 0
    same_model(Path(x), tmp_path / "g.gguf")
    assert main(["extract", x, "--onto", x, "-o", str(tmp_path / "z.gguf")]) == 2
    err = capsys.readouterr().err
    assert "already has an MTP head" in err and "Traceback" not in err


def test_inspect_a_split_set(converted, tmp_path: Path) -> None:
    x = converted("qwen35", "bundled")
    parts = helpers.reshard(x, tmp_path / "s.gguf", shards=3)
    whole, rep = inspect_file(x), inspect_file(parts[1])
    assert rep.layout == Layout.BUNDLED and rep.tensor_count == whole.tensor_count
    assert [t.name for t in rep.mtp_tensors] == [t.name for t in whole.mtp_tensors]
    assert "(+2 more shards)" in rep.path
