"""Block-scaled FP8 sources (float8 e4m3 + 128x128 weight_scale_inv, as DeepSeek / Kimi / Qwen FP8 releases) convert
without torch to exactly what their dequantized float32 twin gives; other quantized formats are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert
from gguf_mtp.checkpoint.folder import Checkpoint
from gguf_mtp.errors import UnsupportedError
from gguf_mtp.ggufio.model import GGUFModel
from tests.synthetic import SyntheticSpec, write_checkpoint

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it


@pytest.fixture(scope="module")
def fp8_pair(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("fp8")
    src = write_checkpoint(d / "fp8", SyntheticSpec("qwen35moe", fp8=True, fused_experts=False), fp8_twin=d / "twin")
    return src, d / "twin"


@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
@pytest.mark.parametrize("layout", ["bundled", "head-only"])
def test_fp8_converts_like_its_dequantized_twin(fp8_pair, tmp_path: Path, outtype: str, layout: str) -> None:
    src, twin = fp8_pair
    assert sum(t.dtype == "F8_E4M3" for t in Checkpoint.open(src).tensors.values()) > 50
    a = convert(src, outfile=tmp_path / "a.gguf", outtype=outtype, layout=layout, progress=False).path
    b = convert(twin, outfile=tmp_path / "b.gguf", outtype=outtype, layout=layout, progress=False).path
    ma, mb = GGUFModel(a), GGUFModel(b)
    assert set(ma.tensors) == set(mb.tensors)
    for n, t in ma.tensors.items():  # exact: FP8 x scale is representable in float32
        assert t.file.read_tensor_bytes(n) == mb.tensors[n].file.read_tensor_bytes(n), n


def test_fp8_decoding_table() -> None:
    from gguf_mtp.checkpoint.shards import E4M3

    assert E4M3[0x00] == 0 and E4M3[0x38] == 1.0 and E4M3[0x7E] == 448.0 and E4M3[0xFE] == -448.0
    assert E4M3[0x01] == 2.0 ** -9 and np.isnan(E4M3[0x7F]) and np.isnan(E4M3[0xFF])


def test_other_quantized_sources_are_refused(fp8_pair, tmp_path: Path) -> None:
    src, _ = fp8_pair
    ck = shutil.copytree(src, tmp_path / "gptq")
    cfg = json.loads((ck / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedError, match="quant_method = 'gptq' is not supported"):
        convert(ck, outfile=tmp_path / "o.gguf", progress=False)
    cfg["quantization_config"] = {"quant_method": "fp8"}
    (ck / "config.json").write_text(json.dumps(cfg))
    idx = json.loads((ck / "model.safetensors.index.json").read_text())
    victim = next(k for k in idx["weight_map"] if k.endswith("mtp.fc.weight_scale_inv"))
    del idx["weight_map"][victim]
    (ck / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(UnsupportedError, match="FP8 without a 2-D weight_scale_inv"):
        convert(ck, outfile=tmp_path / "o.gguf", layout="head-only", progress=False)
    assert not (tmp_path / "o.gguf").exists()
