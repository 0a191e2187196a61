"""Every layout of every family converts and loads in the real llama.cpp (llama-cpp-python)."""

from __future__ import annotations

import pytest

from gguf_mtp import inspect_file
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.ggufio.reader import GGUFFile
from gguf_mtp.layout import Layout
from gguf_mtp.runtime.llama import Context, Model

from .conftest import FAMILIES
from .mtp_smoke import assert_head_drafts
from tests import helpers

PROMPT = "The quick brown fox jumps over the lazy dog."


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["bundled", "trunk-only"])
def test_model_layouts_load_and_generate(converted, family: str, layout: str) -> None:
    path = converted(family, layout)
    assert inspect_file(path).layout == Layout(layout)
    with Model(path) as m, Context(m) as ctx:
        toks = m.tokenize(PROMPT)
        out = helpers.greedy(ctx, toks, 12)
        assert len(out) >= 1 and all(0 <= t < m.n_vocab for t in out)
        logits = helpers.logits(ctx)
        assert logits.shape == (m.n_vocab,) and (logits == logits).all()  # no NaN


@pytest.mark.parametrize("family", FAMILIES)
def test_bundled_and_trunk_only_give_the_same_tokens(converted, family: str) -> None:
    """The head must not change the trunk: greedy output of bundled == trunk-only."""
    outs = []
    for layout in ("bundled", "trunk-only"):
        with Model(converted(family, layout), load_mtp=layout == "bundled") as m, Context(m) as ctx:
            outs.append(helpers.greedy(ctx, m.tokenize(PROMPT), 16))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["bundled", "mtp-only"])
def test_mtp_context_on_bundled_and_self_contained_sidecar(converted, family: str, layout: str) -> None:
    with Model(converted(family, layout), load_mtp=True) as m:
        assert m.n_nextn == 1
        with Context(m, mtp=True) as ctx:
            assert_head_drafts(m, ctx)


@pytest.mark.parametrize("family", FAMILIES)
def test_head_only_sidecar_is_marked_and_small(converted, family: str) -> None:
    head = inspect_file(converted(family, "head-only"))
    full = inspect_file(converted(family, "mtp-only"))
    assert head.layout == Layout.HEAD_ONLY and not head.has_embeddings and not head.problems
    assert full.layout == Layout.MTP_ONLY and full.has_embeddings
    assert head.file_size < full.file_size
    f = GGUFFile(converted(family, "head-only"))
    assert f.get(f"{f.architecture}.nextn_shared_target_tensors") == [
        "token_embd.weight", "output_norm.weight", "output.weight"]
    # stock llama.cpp cannot load it alone: it needs the target's embeddings
    with pytest.raises(GgufMtpError, match="token_embd"):
        Model(converted(family, "head-only"), load_mtp=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_bundled_equals_trunk_plus_head(converted, family: str) -> None:
    bundled = GGUFFile(converted(family, "bundled"))
    trunk = GGUFFile(converted(family, "trunk-only"))
    head = GGUFFile(converted(family, "head-only"))
    sidecar = GGUFFile(converted(family, "mtp-only"))
    assert set(bundled.tensors) == set(trunk.tensors) | set(head.tensors)
    assert not set(trunk.tensors) & set(head.tensors)
    assert set(sidecar.tensors) == set(head.tensors) | {"token_embd.weight", "output_norm.weight", "output.weight"}
    for name, t in head.tensors.items():
        b = bundled.tensors[name]
        assert (t.shape, t.ggml_type) == (b.shape, b.ggml_type)
        assert head.read_tensor_bytes(name) == bundled.read_tensor_bytes(name)
    arch = bundled.architecture
    assert bundled.get(f"{arch}.block_count") == trunk.get(f"{arch}.block_count") + 1
    assert bundled.get(f"{arch}.nextn_predict_layers") == 1
    assert trunk.get(f"{arch}.nextn_predict_layers") is None
    if arch not in ("glm4moe", "deepseek2"):  # hybrid archs: one recurrent flag per block, MTP blocks included
        assert len(bundled.get(f"{arch}.attention.recurrent_layers")) == bundled.get(f"{arch}.block_count")
        assert len(trunk.get(f"{arch}.attention.recurrent_layers")) == trunk.get(f"{arch}.block_count")
        assert bundled.get(f"{arch}.attention.recurrent_layers")[-1] is False


def test_tied_embeddings_and_no_output_tensor(converted) -> None:
    path = converted("qwen35", "bundled", tie_embeddings=True)
    assert "output.weight" not in GGUFFile(path).tensors
    with Model(path, load_mtp=True) as m, Context(m) as ctx:
        assert helpers.greedy(ctx, m.tokenize(PROMPT), 4)
        with Context(m, mtp=True):
            pass


def test_checkpoint_without_mtp_weights_converts_to_trunk_only(checkpoint, tmp_path) -> None:
    from gguf_mtp import convert

    src = checkpoint("qwen35", mtp=False)
    r = convert(src, outfile=tmp_path / "m.gguf", outtype="q8_0", progress=False)
    assert r.layout == Layout.TRUNK_ONLY and r.notes
    with Model(r.path) as m, Context(m) as ctx:
        assert helpers.greedy(ctx, m.tokenize(PROMPT), 4)


@pytest.mark.parametrize("family", ["glm4moe", "deepseek2"])
def test_identical_mtp_embedding_copies_are_left_out(checkpoint, tmp_path, family: str) -> None:
    """GLM / DeepSeek MTP layers carry copies of the embeddings and LM head; identical copies are not written
    (llama.cpp falls back to token_embd / output), different ones are kept."""
    import json
    import shutil

    import numpy as np

    from gguf_mtp import convert
    from tests.synthetic.safetensors_writer import write_safetensors

    src = checkpoint(family)
    r = convert(src, outfile=tmp_path / "a.gguf", outtype="q8_0", progress=False)
    names = set(GGUFFile(r.path).tensors)
    assert not any(n.endswith((".nextn.embed_tokens.weight", ".nextn.shared_head_head.weight")) for n in names)
    assert any("identical to the model's" in n for n in r.notes)
    with Model(r.path, load_mtp=True) as m, Context(m, mtp=True):
        pass
    ck = shutil.copytree(src, tmp_path / "ck")  # now make the copy differ: it must be kept
    idx = json.loads((ck / "model.safetensors.index.json").read_text())
    name = next(k for k in idx["weight_map"] if k.endswith(".embed_tokens.weight") and k.startswith("model.layers."))
    shape = (512, 64)
    write_safetensors(ck / "extra.safetensors", [(name, shape, "F32", lambda: np.ones(shape, np.float32).reshape(-1))])
    idx["weight_map"][name] = "extra.safetensors"
    (ck / "model.safetensors.index.json").write_text(json.dumps(idx))
    r2 = convert(ck, outfile=tmp_path / "b.gguf", outtype="q8_0", progress=False)
    assert any(n.endswith(".nextn.embed_tokens.weight") for n in GGUFFile(r2.path).tensors)
