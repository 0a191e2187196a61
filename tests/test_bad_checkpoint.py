"""Malformed checkpoints: every config.json field gguf-mtp reads, and the tokenizer and index fields, given
values of the wrong kind or out of range. Property: ``convert`` works or refuses with one line naming the file
and key (only GgufMtpError escapes), and the absurd sizes that used to allocate until the machine ran out are
refused before allocating (checked under an address-space limit in a subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gguf_mtp import convert
from gguf_mtp.archs import ARCHS
from gguf_mtp.checkpoint.schema import CONFIG, ROPE
from gguf_mtp.errors import FormatError, GgufMtpError

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

ROOT = Path(__file__).resolve().parents[1]
#: one family per config dialect: together their configs hold every key the families read
SWEEP = tuple(ARCHS)  # a synthetic checkpoint per arch of the table


@pytest.fixture
def header_only(monkeypatch):
    """convert() up to the header: plan, metadata and tokenizer are built, tensor data is not written."""
    import sys as _sys

    from gguf_mtp.ggufio.writer import encode_header

    monkeypatch.setattr(_sys.modules["gguf_mtp.convert"], "write_gguf",
                        lambda path, kvs, tensors, **kw: encode_header(kvs, tensors, 32))


def paths(d: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of a config, nested objects included (rope_parameters.rope_theta, text_config.*, ...)."""
    out = []
    for k, v in d.items():
        out.append(prefix + (k,))
        if isinstance(v, dict):
            out += paths(v, prefix + (k,))
    return out


def set_path(d: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


def bad_values(value: Any) -> list[Any]:
    """Values of another kind than ``value``, an absurd size, and null."""
    if isinstance(value, str):
        return [7, [value], None]
    if isinstance(value, (dict, list)):
        return ["x", 1e9 if isinstance(value, list) else [1], None]
    return ["x", 1e9, None]


@pytest.mark.parametrize("family", SWEEP)
def test_every_config_field(checkpoint, tmp_path: Path, header_only, family: str) -> None:
    src = checkpoint(family)
    ck = tmp_path / "ck"
    shutil.copytree(src, ck)
    base = json.loads((src / "config.json").read_text())
    escaped, refused = [], 0
    for path in paths(base):
        for value in bad_values(_get(base, path)):
            cfg = json.loads(json.dumps(base))
            set_path(cfg, path, value)
            (ck / "config.json").write_text(json.dumps(cfg))
            try:
                convert(ck, outfile=tmp_path / "o.gguf", progress=False, force=True)
            except GgufMtpError as e:
                refused += 1
                msg = str(e)
                assert "\n" not in msg and str(ck) in msg, (path, value, msg)
            except Exception as e:  # noqa: BLE001 - the property under test
                escaped.append(f"{'.'.join(path)} = {value!r}: {type(e).__name__}: {e}")
    assert not escaped, "\n".join(escaped)
    assert refused > len(paths(base)), "the sweep should refuse most of its cases"


def _get(d: dict[str, Any], path: tuple[str, ...]) -> Any:
    for k in path:
        d = d[k]
    return d


ADDED = [
    # (family, edit of the config dict, key named in the message)
    ("qwen35", lambda c: c.update(quantization_config="fp8"), "quantization_config"),
    ("qwen35", lambda c: c.update(quantization_config={"quant_method": "fp8", "weight_block_size": "x"}),
     "weight_block_size"),
    ("qwen35", lambda c: c.update(text_config=[1, 2]), "text_config"),
    ("qwen35", lambda c: c["text_config"].update(layer_types=["linear_attention"]), "layer_types"),
    ("qwen35", lambda c: c["text_config"].update(num_hidden_layers=1e9), "num_hidden_layers"),
    ("qwen35", lambda c: c["text_config"].update(num_attention_heads=0), "num_attention_heads"),
    ("qwen35", lambda c: c["text_config"].update(head_dim=0), "head_dim"),
    ("qwen35", lambda c: c["text_config"].update(num_key_value_heads=3), "num_key_value_heads"),
    ("qwen35", lambda c: c["text_config"].update(rope_parameters={"rope_theta": "1e6"}), "rope_theta"),
    ("qwen35", lambda c: c["text_config"].update(rope_parameters={"mrope_section": [1, 2, 3, 4, 5]}), "mrope_section"),
    ("qwen35", lambda c: c["text_config"].update(rms_norm_eps=float("nan")), "rms_norm_eps"),
    ("qwen35", lambda c: c["text_config"].update(eos_token_id=10**9), "eos_token_id"),
    ("qwen35", lambda c: c["text_config"].update(eos_token_id=True), "eos_token_id"),
    ("qwen35", lambda c: c.update(architectures="Qwen3_5ForCausalLM"), "architectures"),
    ("deepseek2", lambda c: c.update(rope_scaling={"type": "yarn", "factor": "x"}), "factor"),
    ("deepseek2", lambda c: c.update(first_k_dense_replace=600), "first_k_dense_replace"),
    ("deepseek2", lambda c: c.update(num_experts_per_tok=99), "num_experts_per_tok"),
    ("mimo2", lambda c: c.update(hybrid_layer_pattern=[0]), "hybrid_layer_pattern"),
    ("mimo2", lambda c: c.update(hybrid_layer_pattern=["a"] * 8), "hybrid_layer_pattern"),
    ("step35", lambda c: c.update(moe_layers_enum="1,x"), "moe_layers_enum"),
    ("step35", lambda c: c.update(swiglu_limits=["a"]), "swiglu_limits"),
    ("step35", lambda c: c.update(attention_other_setting={"num_attention_heads": "x"}), "num_attention_heads"),
    ("step35", lambda c: c.update(rope_theta=[1.0, "x"]), "rope_theta"),
    ("step35", lambda c: c.update(local_rope_theta="x"), "local_rope_theta"),
    ("step35", lambda c: c.update(max_seq_len=-4), "max_seq_len"),
    ("step35", lambda c: c.update(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": "1",
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
     "low_freq_factor"),
    ("step35", lambda c: c.update(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": [4.0], "original_max_position_embeddings": 64}),
     "high_freq_factor"),
    ("deepseek2", lambda c: c.update(mlp_layer_types="dense"), "mlp_layer_types"),
    ("deepseek2", lambda c: c.update(_name_or_path=["a"]), "_name_or_path"),
]


def test_every_schema_key_is_tried(checkpoint) -> None:
    """Each key of the schema (what the families read) is swept in some family's config or has a case above."""
    seen = {key for _, _, key in ADDED}
    for family in SWEEP:
        seen |= {p[-1] for p in paths(json.loads((checkpoint(family) / "config.json").read_text()))}
    assert not (set(CONFIG) | set(ROPE)) - seen, sorted((set(CONFIG) | set(ROPE)) - seen)


@pytest.mark.parametrize("family,edit,key", ADDED, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(ADDED)])
def test_malformed_config(checkpoint, tmp_path: Path, header_only, family: str, edit, key: str) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(checkpoint(family), ck)
    cfg = json.loads((ck / "config.json").read_text())
    edit(cfg)
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FormatError) as e:
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)
    assert "config.json" in str(e.value) and key in str(e.value) and "\n" not in str(e.value)


def _edit_json(path: Path, fn) -> None:  # type: ignore[no-untyped-def]
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))


TOKENIZER_CASES = [
    # (file, edit, words of the message)
    ("tokenizer.json", lambda t: t["model"].update(vocab=[["a", 0.0], ["b", 0.0]]), "model.vocab is list"),
    ("tokenizer.json", lambda t: t["model"].update(vocab={"a": "0"}), "is not a token id"),
    ("tokenizer.json", lambda t: t["model"].update(vocab={"a": 10**9}), "outside the vocabulary"),
    ("tokenizer.json", lambda t: t["model"].update(vocab={"a": -1}), "outside the vocabulary"),
    ("tokenizer.json", lambda t: t["added_tokens"].append({"id": 10**9, "content": "<x>"}), "outside the vocabulary"),
    ("tokenizer.json", lambda t: t["added_tokens"].append({"id": 5, "content": None}), "no string 'content'"),
    ("tokenizer.json", lambda t: t.update(added_tokens={"a": 1}), "added_tokens is dict"),
    ("tokenizer.json", lambda t: t["model"].update(merges=[1, 2]), "is not a merge"),
    ("tokenizer.json", lambda t: t["model"].update(merges="a b"), "model.merges is str"),
    ("tokenizer.json", lambda t: t.update(model="BPE"), "model is str"),
    ("tokenizer_config.json", lambda t: t.update(chat_template=[1, "x"]), None),  # ignored: no default template
    ("model.safetensors.index.json", lambda t: t["weight_map"].update({"x": ["a"]}), "not a string"),
    ("model.safetensors.index.json", lambda t: t.update(weight_map=[1]), "has no weight_map"),
]


@pytest.mark.parametrize("name,edit,words", TOKENIZER_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(TOKENIZER_CASES)])
def test_malformed_tokenizer_and_index(checkpoint, tmp_path: Path, header_only, name: str, edit, words) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(checkpoint("qwen35"), ck)
    _edit_json(ck / name, edit)
    if words is None:
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)
        return
    with pytest.raises(FormatError, match=words) as e:
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)
    assert name in str(e.value)


def test_tiktoken_special_ids(checkpoint, tmp_path: Path, header_only) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(checkpoint("kimik2", vocab_size=640, mtp=False), ck)
    for key, words in (("1000000000", "outside the vocabulary"), ("abc", "is not a token id")):
        _edit_json(ck / "tokenizer_config.json",
                   lambda t: t["added_tokens_decoder"].update({key: {"content": "<x>"}}))  # noqa: B023
        with pytest.raises(FormatError, match=words):
            convert(ck, outfile=tmp_path / "o.gguf", progress=False)
        _edit_json(ck / "tokenizer_config.json", lambda t: t["added_tokens_decoder"].pop(key))  # noqa: B023


def test_chat_template_file_not_text(checkpoint, tmp_path: Path, header_only) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(checkpoint("qwen35"), ck)
    (ck / "chat_template.jinja").write_bytes(b"\xff\xfe{{ x }}")
    with pytest.raises(FormatError, match=r"can't decode") as e:
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)
    assert "\n" not in str(e.value)


BOMBS = textwrap.dedent("""
    import json, resource, shutil, sys
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))   # what used to happen needs far more
    from gguf_mtp import convert
    from gguf_mtp.errors import GgufMtpError
    src, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    def case(name, file, edit):
        ck = tmp / name
        shutil.copytree(src, ck)
        d = json.loads((ck / file).read_text()); edit(d); (ck / file).write_text(json.dumps(d))
        try:
            convert(ck, outfile=tmp / (name + ".gguf"), progress=False)
            print(name, "accepted")
        except GgufMtpError as e:
            print(name, "refused:", e)
    case("layers", "config.json", lambda c: c["text_config"].update(num_hidden_layers=1e9))
    case("token_id", "tokenizer.json", lambda t: t["added_tokens"].append({"id": 10**9, "content": "<x>"}))
    case("vocab_id", "tokenizer.json", lambda t: t["model"]["vocab"].update({"zz": 10**9}))
    case("layer_types", "config.json", lambda c: c["text_config"].update(layer_types=["full_attention"] * 10**7))
""")


def test_memory_bombs_are_refused_before_allocating(checkpoint, tmp_path: Path) -> None:
    # OpenBLAS (numpy's) reserves buffers a core at import: one thread, so the address-space limit holds on a
    # host with many cores as on two
    env = os.environ | {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", BOMBS, str(checkpoint("qwen35")), str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = dict(ln.split(" ", 1) for ln in r.stdout.splitlines())
    assert set(lines) == {"layers", "token_id", "vocab_id", "layer_types"}, r.stdout
    for name, what in lines.items():
        assert what.startswith("refused:"), (name, what)
    assert "num_hidden_layers" in lines["layers"] and "512" in lines["layers"]
    assert "1000000000" in lines["token_id"] and "1000000000" in lines["vocab_id"]


def test_vocabulary_larger_than_llama_cpp_takes(checkpoint) -> None:
    """An embedding of 2^25 rows (a header can claim it over a sparse file) would make a 2^25-entry token list."""
    from gguf_mtp.checkpoint.tokenizer import tokenizer_kvs

    with pytest.raises(FormatError, match="33554432 rows"):
        tokenizer_kvs(checkpoint("qwen35"), {}, 1 << 25, "qwen35")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors.index.json"])
def test_json_nested_too_deeply(checkpoint, tmp_path: Path, name: str) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(checkpoint("qwen35"), ck)
    (ck / name).write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(FormatError, match=rf"{name}: not valid JSON"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)
