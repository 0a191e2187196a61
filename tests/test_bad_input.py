"""Bad input ends in one clear line naming the file/tensor/key, never a traceback, never partial output."""

from __future__ import annotations

import importlib
import json
import shutil
import struct
from pathlib import Path

import pytest

from gguf_mtp import convert
from gguf_mtp.errors import FormatError, GgufMtpError, MissingTensorError, OutputExistsError, UnsupportedError
from gguf_mtp_cli.main import main

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it


def copy_ckpt(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def no_leftovers(folder: Path) -> None:
    assert not [p for p in folder.iterdir() if p.name.endswith(".partial") or p.suffix == ".gguf"]


def test_folder_without_config(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    with pytest.raises(FormatError, match=r"config\.json: missing"):
        convert(tmp_path / "m", outfile=tmp_path / "o.gguf", progress=False)
    no_leftovers(tmp_path)


def test_unsupported_architecture_lists_supported(checkpoint, tmp_path: Path) -> None:
    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    cfg = json.loads((ck / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedError, match=r"'LlamaForCausalLM' is not supported; supported: .*Qwen3_5ForCausalLM"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)


def test_missing_shard(checkpoint, tmp_path: Path) -> None:
    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    (ck / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FormatError, match=r"model-00002-of-00002\.safetensors: shard is missing"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)


def test_truncated_shard(checkpoint, tmp_path: Path) -> None:
    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    shard = ck / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1000])
    with pytest.raises(FormatError, match=r"00002\.safetensors: tensor '.*' ends at byte .* truncated"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)
    no_leftovers(tmp_path)


def test_tensor_missing_from_the_index(checkpoint, tmp_path: Path) -> None:
    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    idx = json.loads((ck / "model.safetensors.index.json").read_text())
    del idx["weight_map"]["model.language_model.layers.1.linear_attn.in_proj_z.weight"]
    (ck / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(MissingTensorError, match=r"'model\.language_model\.layers\.1\.linear_attn\.in_proj_z\.weight'"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)


def test_index_names_a_tensor_the_shard_lacks(checkpoint, tmp_path: Path) -> None:
    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    idx = json.loads((ck / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.language_model.layers.9.extra.weight"] = "model-00001-of-00002.safetensors"
    (ck / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(MissingTensorError, match=r"layers\.9\.extra\.weight' listed in .* is not in this shard"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)


def test_shape_mismatch(checkpoint, tmp_path: Path) -> None:
    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    cfg = json.loads((ck / "config.json").read_text())
    cfg["text_config"]["intermediate_size"] = 96
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FormatError, match=r"tensor '.*mlp\.gate_proj\.weight' has shape \[128, 64\], expected \[96, 64\]"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)


def test_existing_output_needs_force(checkpoint, tmp_path: Path) -> None:
    out = tmp_path / "o.gguf"
    out.write_bytes(b"keep me")
    with pytest.raises(OutputExistsError, match=r"o\.gguf: output exists; pass --force"):
        convert(checkpoint("qwen35"), outfile=out, progress=False)
    assert out.read_bytes() == b"keep me"
    convert(checkpoint("qwen35"), outfile=out, progress=False, force=True)
    assert out.read_bytes()[:4] == b"GGUF"


def test_mtp_on_a_checkpoint_without_head(checkpoint, tmp_path: Path) -> None:
    with pytest.raises(MissingTensorError, match=r"no MTP weights \(mtp\.fc\.weight and mtp\.layers\.0\.\* are missing\) "
                                                 r"although config\.json declares mtp_num_hidden_layers=1"):
        convert(checkpoint("qwen35", mtp=False), outfile=tmp_path / "o.gguf", layout="mtp-only", progress=False)
    no_leftovers(tmp_path)


def test_partial_head_names_the_missing_tensor(checkpoint, tmp_path: Path) -> None:
    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    idx = json.loads((ck / "model.safetensors.index.json").read_text())
    del idx["weight_map"]["mtp.pre_fc_norm_hidden.weight"]
    (ck / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(MissingTensorError, match=r"'mtp\.pre_fc_norm_hidden\.weight' is not in the checkpoint"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)


def test_unknown_tensor_is_refused(checkpoint, tmp_path: Path) -> None:
    """A tensor we would silently drop means the checkpoint is not what we think: refuse."""
    from tests.synthetic.safetensors_writer import write_safetensors
    import numpy as np

    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    write_safetensors(ck / "extra.safetensors", [("mtp.embed_tokens.weight", (4, 4), "F32", lambda: np.zeros(16, np.float32))])
    idx = json.loads((ck / "model.safetensors.index.json").read_text())
    idx["weight_map"]["mtp.embed_tokens.weight"] = "extra.safetensors"
    (ck / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(UnsupportedError, match=r"does not know how to map: mtp\.embed_tokens\.weight"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)


def test_output_over_an_input_is_refused(checkpoint, tmp_path: Path) -> None:
    ck = copy_ckpt(checkpoint("qwen35"), tmp_path / "ck")
    shard = ck / "model-00001-of-00002.safetensors"
    before = shard.read_bytes()
    with pytest.raises(GgufMtpError, match="would overwrite an input"):
        convert(ck, outfile=shard, force=True, progress=False)
    assert shard.read_bytes() == before


def test_interrupted_write_leaves_nothing(checkpoint, tmp_path: Path, monkeypatch) -> None:
    import gguf_mtp.ggufio.writer as w

    calls = {"n": 0}
    real = w.write_all

    def flaky(fh, data):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 20:
            raise KeyboardInterrupt
        real(fh, data)

    monkeypatch.setattr(w, "write_all", flaky)
    monkeypatch.setattr(importlib.import_module("gguf_mtp.convert"), "write_all", flaky)  # the module, not the function
    out = tmp_path / "o.gguf"
    with pytest.raises(KeyboardInterrupt):
        convert(checkpoint("qwen35"), outfile=out, outtype="q8_0", progress=False)
    assert not out.exists()
    assert not list(tmp_path.glob(".o.gguf*"))


@pytest.mark.parametrize("argv,needle", [
    (["convert", "/nonexistent/model"], "no such folder"),
    (["convert", "{ck}", "--outtype", "q4_k"], "--outtype 'q4_k' is not supported"),
    (["convert", "{ck}", "--head-only"], "--head-only"),
    (["inspect", "{ck}/config.json"], "bad magic"),
    (["inspect", "/nonexistent.gguf"], "no such file"),
    (["plot", "/nonexistent.json"], "no such file"),
    (["plot", "{ck}/config.json", "-o", "/nonexistent/x.png"], "/nonexistent"),
    (["plot", "{ck}/model.safetensors.index.json"], "neither run statistics"),
])
def test_cli_errors_are_one_line(checkpoint, capsys, argv: list[str], needle: str) -> None:
    ck = str(checkpoint("qwen35"))
    rc = main([a.replace("{ck}", ck) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert needle in err
    assert "Traceback" not in err


def test_safetensors_header_garbage(tmp_path: Path) -> None:
    from gguf_mtp.checkpoint.shards import read_header

    p = tmp_path / "x.safetensors"
    p.write_bytes(struct.pack("<Q", 10) + b"not json!!")
    with pytest.raises(FormatError, match="not valid JSON"):
        read_header(p)
    p.write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(FormatError, match="header length"):
        read_header(p)


def test_cli_version(capsys) -> None:
    import gguf_mtp

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"gguf-mtp {gguf_mtp.__version__}"


LONG = "9" * 5000


def test_run_empty_prompt_is_refused_before_loading(converted, capsys) -> None:
    """`run -p ''` loaded the model (and printed its start-up lines) before saying "empty prompt"; it is refused
    as the options are read, in one line naming -p."""
    assert main(["run", str(converted("qwen35", "bundled")), "-p", "", "-n", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "'--prompt' / '-p': empty" in err, err


@pytest.mark.parametrize("argv", [
    ["convert", "{ck}", "-o", ""],  # wrote ./<model>-BF16.gguf
    ["convert", "{ck}", "-o", "x.gguf", "--draft-head-type", ""],  # wrote x.gguf without a draft head
    ["convert", "{ck}", "-o", "x.gguf", "--revision", ""],
    ["convert", "{ck}", "-o", "x.gguf", "--outtype", LONG],  # the error quoted all 5000 characters
    ["extract", "{gguf}", "-o", "y.gguf", "--mtp-type", ""],  # copied the head as it is
    ["extract", "{gguf}", "-o", "y.gguf", "--draft-head-type", ""],
    ["quantize", "{gguf}", "q.gguf", LONG],
    ["quantize", "{bf16}", "q.gguf", "Q4_0", "--draft-head-type", ""],  # quantized without a draft head
    ["run", "{gguf}", "-p", "x", "-n", "2", "--tensor-split", ""],  # ran as if not given
    ["run", "{gguf}", "-p", "x", "-n", "2", "--rpc", ""],  # ran without the servers
    ["run", "{gguf}", "-p", "x", "-n", "2", "--tensor-split", LONG],
    ["run", "{gguf}", "-p", "x", "-n", "2", "--spec-draft-n-max", LONG],
    ["plot", "{gguf}", "-o", ""],
], ids=lambda a: " ".join(x[:12] or "''" for x in a[2:]))
def test_empty_and_overlong_option_values_are_one_short_line(checkpoint, converted, tmp_path: Path, capsys,
                                                             monkeypatch, argv: list[str]) -> None:
    """Issue 23: an empty value (an unset shell variable) was read as "not given", and a 5000-character one came
    back whole in the error. Each is refused, in one short line, before anything is read or written."""
    ck, gguf = str(checkpoint("qwen35")), str(converted("qwen35", "bundled"))
    bf16 = str(converted("qwen35", "bundled", "bf16"))  # a Q8_0 trunk could not be quantized to Q4_0 anyway
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    rc = main([a.replace("{ck}", ck).replace("{gguf}", gguf).replace("{bf16}", bf16) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1 and len(err) < 300, err
    assert not list(work.iterdir())
