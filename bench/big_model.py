"""Big synthetic GGUFs in seconds: a small converted template (a few trunk layers at real widths, a head) is
"inflated" to a full layer count (and expert count) with the trunk's matrices as K-quant tensors of zeros,
written as holes of a sparse file.

Why zeros measure speed honestly: ggml's kernels do the same work whatever the values, and the template is the
oracle fixture of tests.synthetic with trunk_scale 0 (its trunk adds nothing to the residual stream), so the
inflated model computes exactly the template's function: the MTP head keeps its acceptance. The MoE routers are
the exception: they get random weights, so each token picks its own experts as in a real model (a zero router
would send every token to the same experts and flatter batched verification). Token embeddings, LM head and
the MTP block keep the template's Q8_0.

    python -m bench.big_model TEMPLATE.gguf OUT.gguf --layers 40 [--experts 512 --experts-used 10] [--trunk-type q4_k_m]
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, Keys

from gguf_mtp.ggml_types import tensor_nbytes
from gguf_mtp.ggufio.format import KV, GGUFValueType
from gguf_mtp.ggufio.keys import arch_key
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.ggufio.writer import OutTensor, copy_range, write_gguf

_BLK = re.compile(r"blk\.(\d+)\.(.+)")
_EXPERTS = re.compile(r"ffn_(gate|up|down|gate_up)_exps\.weight$")
_ROUTER = "ffn_gate_inp.weight"
_MORE_BITS = re.compile(r"(attn_v|ffn_down|ffn_down_exps|ffn_down_shexp)\.weight$")  # Q4_K_M's Q6_K tensors


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits (llama-quant.cpp): the first and last eighth, and every third layer between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _trunk_type(suffix: str, shape: tuple[int, ...], layer: int, n_layers: int, trunk: str, template_type: int) -> int:
    if len(shape) < 2 or "ssm_conv1d" in suffix or suffix in (_ROUTER, "ffn_gate_inp_shexp.weight"):
        return template_type
    if trunk == "q8_0":
        return GGMLQuantizationType.Q8_0 if shape[0] % 32 == 0 else template_type
    if shape[0] % 256:
        return template_type
    more = _MORE_BITS.search(suffix) and _more_bits(layer, n_layers)
    return GGMLQuantizationType.Q6_K if more else GGMLQuantizationType.Q4_K


def _hole(nbytes: int):  # type: ignore[no-untyped-def]
    def write(fh, progress) -> None:  # type: ignore[no-untyped-def]
        os.ftruncate(fh.fileno(), fh.tell() + nbytes)  # zeros without writing them: a sparse hole
        fh.seek(0, os.SEEK_END)
        progress(nbytes)
    return write


def _copy(t):  # type: ignore[no-untyped-def]
    def write(fh, progress) -> None:  # type: ignore[no-untyped-def]
        copy_range(t.file.path, t.info.offset, t.info.nbytes, fh, progress)
    return write


def _random_f32(shape: tuple[int, ...], seed: int, std: float = 0.02):  # type: ignore[no-untyped-def]
    def write(fh, progress) -> None:  # type: ignore[no-untyped-def]
        x = np.random.default_rng(seed).standard_normal(int(np.prod(shape)), dtype=np.float32) * std
        fh.write(x.tobytes())
        progress(x.nbytes)
    return write


def inflate(template: Path, out: Path, layers: int, *, experts: int | None = None, experts_used: int | None = None,
            trunk: str = "q4_k_m") -> Path:
    """Write ``out``: ``template`` with ``layers`` trunk layers (template layer ``i % n`` repeated) and, for MoE,
    ``experts`` experts per layer. Returns ``out``."""
    m = GGUFModel(template)
    arch = m.arch
    n_mtp = int(m.arch_get(Keys.LLM.NEXTN_PREDICT_LAYERS, 0) or 0)
    n_tpl = int(m.arch_get(Keys.LLM.BLOCK_COUNT)) - n_mtp
    n_all = layers + n_mtp
    kvs = []
    for key, kv in m.kv.items():
        if key == arch_key(Keys.LLM.BLOCK_COUNT, arch):
            kv = KV.u32(key, n_all)
        elif experts and key == f"{arch}.expert_count":
            kv = KV.u32(key, experts)
        elif experts_used and key == f"{arch}.expert_used_count":
            kv = KV.u32(key, experts_used)
        elif (kv.vtype == GGUFValueType.ARRAY and kv.item_type is not None and kv.item_type != GGUFValueType.STRING
              and len(kv.value) == n_tpl + n_mtp):
            v = list(kv.value)  # per-layer arrays: the template's pattern, then the head's entries
            kv = KV.array(key, kv.item_type, [v[i % n_tpl] for i in range(layers)] + v[n_tpl:])
        kvs.append(kv)
    tensors: list[OutTensor] = []
    blocks: dict[int, list] = {}
    for name, t in m.tensors.items():
        b = _BLK.match(name)
        if b:
            blocks.setdefault(int(b.group(1)), []).append((b.group(2), t))
        else:
            tensors.append(OutTensor(name, t.info.shape, t.info.ggml_type, _copy(t),
                                     source=(t.file.path, t.info.offset)))
    seed = 0
    for il in range(n_all):
        head = il >= layers
        src = n_tpl + (il - layers) if head else il % n_tpl
        for suffix, t in blocks[src]:
            shape = tuple(t.info.shape)
            if experts and (_EXPERTS.search(suffix) or suffix == _ROUTER):
                shape = shape[:-1] + (experts,)
            name = f"blk.{il}.{suffix}"
            if suffix == _ROUTER and experts:
                seed += 1
                tensors.append(OutTensor(name, shape, GGMLQuantizationType.F32, _random_f32(shape, seed)))
            elif head:  # the MTP block keeps the template's values (its experts, when widened, are zeros)
                if shape == tuple(t.info.shape):
                    tensors.append(OutTensor(name, shape, t.info.ggml_type, _copy(t),
                                             source=(t.file.path, t.info.offset)))
                else:
                    tensors.append(OutTensor(name, shape, t.info.ggml_type,
                                             _hole(tensor_nbytes(shape, t.info.ggml_type))))
            elif len(shape) >= 2 and "ssm_conv1d" not in suffix and suffix != "ffn_gate_inp_shexp.weight":
                ty = _trunk_type(suffix, shape, il, layers, trunk, t.info.ggml_type)
                tensors.append(OutTensor(name, shape, ty, _hole(tensor_nbytes(shape, ty))))
            else:  # norms, conv kernels, decay rates: small, copied
                tensors.append(OutTensor(name, shape, t.info.ggml_type, _copy(t), source=(t.file.path, t.info.offset)))
    tmp = out.with_name(out.name + ".partial")
    try:
        write_gguf(tmp, kvs, tensors, alignment=m.alignment)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("template", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, required=True, help="trunk layers of the output")
    ap.add_argument("--experts", type=int, help="experts per MoE layer (default: the template's)")
    ap.add_argument("--experts-used", type=int)
    ap.add_argument("--trunk-type", choices=("q4_k_m", "q8_0"), default="q4_k_m")
    a = ap.parse_args()
    p = inflate(a.template, a.out, a.layers, experts=a.experts, experts_used=a.experts_used, trunk=a.trunk_type)
    print(f"{p}: {p.stat().st_size / 1e9:.1f} GB ({p.stat().st_blocks * 512 / 1e9:.2f} GB on disk)")


if __name__ == "__main__":
    main()
