"""Bytes a decode step must read from GPU memory, from a GGUF's tensor sizes, and the share of the memory-bound
limit (the roofline) a measured speed reaches.

A target decode of any small batch reads every trunk block, the output norm and the LM head once (the
embedding lookup reads only its rows). An MTP decode reads the MTP block(s) and the LM head the head uses
(its own ``nextn.shared_head_head`` if present, else ``output``; ``token_embd`` when the model ties them).
KV cache and recurrent-state reads are left out: at 128 tokens of context they are small next to the weights.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Peak memory bandwidth, GB/s (vendor figures); matched against the start of nvidia-smi's GPU name.
HBM_GBS = {
    "NVIDIA H200": 4800, "NVIDIA H100 NVL": 3900, "NVIDIA H100 PCIe": 2000, "NVIDIA H100": 3350,
    "NVIDIA GH200": 4000, "NVIDIA A100-SXM4-80GB": 2039, "NVIDIA A100 80GB PCIe": 1935, "NVIDIA A100": 1555,
    "NVIDIA L40S": 864, "NVIDIA L4": 300, "NVIDIA GeForce RTX 4090": 1008, "NVIDIA GeForce RTX 3090": 936,
}


@dataclass
class StepBytes:
    trunk: int  # trunk blocks
    lm_head: int  # output (or tied token_embd) + output_norm
    mtp_block: int  # one MTP block
    mtp_lm_head: int  # the LM head an MTP decode reads

    @property
    def plain(self) -> int:
        """Bytes per plain decode (one token, or one verify batch)."""
        return self.trunk + self.lm_head

    def step(self, n_mtp_decodes: int) -> int:
        """Bytes per speculative step: one verify and ``n_mtp_decodes`` MTP decodes."""
        return self.plain + n_mtp_decodes * (self.mtp_block + self.mtp_lm_head)


def step_bytes(path: str | Path) -> StepBytes:
    """Weight bytes per decode for a bundled model (the head's first block stands for each MTP decode)."""
    from gguf_mtp.ggufio.model import GGUFModel

    m = GGUFModel(path)
    n_block = int(m.arch_get("{arch}.block_count", 0) or 0)
    n_nextn = int(m.arch_get("{arch}.nextn_predict_layers", 0) or 0)
    n_trunk = n_block - n_nextn
    trunk = mtp = 0
    sizes = {name: t.info.nbytes for name, t in m.tensors.items()}
    for name, size in sizes.items():
        blk = re.match(r"blk\.(\d+)\.", name)
        if not blk:
            continue
        i = int(blk.group(1))
        if i < n_trunk:
            trunk += size
        elif i == n_trunk and "nextn.embed_tokens" not in name and "nextn.shared_head_head" not in name:
            mtp += size
    out = sizes.get("output.weight", sizes.get("token_embd.weight", 0))
    head = sizes.get(f"blk.{n_trunk}.nextn.shared_head_head.weight", out)
    return StepBytes(trunk=trunk, lm_head=out + sizes.get("output_norm.weight", 0), mtp_block=mtp, mtp_lm_head=head)


def gpu_name() -> str | None:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=10)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def peak_gbs(name: str | None) -> float | None:
    """Peak memory bandwidth of the named GPU (longest matching prefix), or None."""
    if not name:
        return None
    best = max((k for k in HBM_GBS if name.startswith(k)), key=len, default=None)
    return float(HBM_GBS[best]) if best else None


def roofline(bytes_per_step: float, seconds_per_step: float, gbs: float | None) -> dict[str, float | None]:
    """Achieved GB/s and its share of the peak (None without a peak)."""
    achieved = bytes_per_step / seconds_per_step / 1e9 if seconds_per_step > 0 else 0.0
    return {"gb_per_step": round(bytes_per_step / 1e9, 4), "achieved_gbs": round(achieved, 1),
            "roofline_share": round(achieved / gbs, 3) if gbs else None,
            "roofline_ms": round(1000 * bytes_per_step / (gbs * 1e9), 3) if gbs else None}
