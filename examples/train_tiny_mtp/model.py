"""A small Qwen3.5 text model with its MTP head, in plain PyTorch, written from the architecture's definition.

Same parameter names and semantics as a Hugging Face Qwen3.5 checkpoint (``model.language_model.*``,
``lm_head``, ``mtp.*``), so the saved state dict converts like a real one:

- decoder layers alternate Gated DeltaNet ("linear_attention") and gated full attention per ``layer_types``;
- RMSNorm weights are stored as offsets from 1 (``x * (1 + w)``), except the gated norm inside DeltaNet;
- full attention: q_proj yields [query, gate] per head, q/k RMSNorm, partial rotary embedding on the first
  ``head_dim * partial_rotary_factor`` dims (rotate-half style; with text positions, interleaved M-RoPE is
  plain RoPE), output multiplied by sigmoid(gate);
- DeltaNet: causal depthwise conv + SiLU over [q, k, v], L2-normed q/k, beta = sigmoid(b),
  decay g = -exp(A_log) * softplus(a + dt_bias), value heads grouped by key head (head j uses key head j // r);
- MTP: position p sees the embedding of token p and the trunk's final *normed* hidden state of position p-1
  (zeros at p = 0), concatenated [embedding, hidden] after their own norms, projected by ``fc``, one gated
  full-attention decoder layer, ``mtp.norm``, the shared LM head: it predicts token p+1 one step earlier than
  the trunk could. This is what llama.cpp's MTP graph computes with the hidden rows the runtime hands it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TinyConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    num_hidden_layers: int = 8
    intermediate_size: int = 768
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 64
    linear_value_head_dim: int = 64
    linear_conv_kernel_dim: int = 4
    full_attention_interval: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 0.25
    max_position_embeddings: int = 4096
    mtp_num_hidden_layers: int = 1
    tie_word_embeddings: bool = False
    layer_types: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.layer_types:
            k = self.full_attention_interval
            self.layer_types = ["linear_attention" if (i + 1) % k else "full_attention"
                                for i in range(self.num_hidden_layers)]

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    def hf_config(self, eos: int, bos: int) -> dict:
        """config.json of a Qwen3.5 checkpoint (text keys under ``text_config``, as the real repos have them)."""
        pairs = self.rotary_dim // 2
        section = [pairs - 2 * (pairs // 3), pairs // 3, pairs // 3]
        text = {k: v for k, v in asdict(self).items()
                if k not in ("rope_theta", "partial_rotary_factor", "tie_word_embeddings")}
        text.update({
            "model_type": "qwen3_5_text", "hidden_act": "silu", "attn_output_gate": True, "attention_bias": False,
            "attention_dropout": 0.0, "mtp_use_dedicated_embeddings": False, "mamba_ssm_dtype": "float32",
            "bos_token_id": bos, "eos_token_id": eos, "dtype": "bfloat16",
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta,
                                "partial_rotary_factor": self.partial_rotary_factor,
                                "mrope_section": section, "mrope_interleaved": True},
        })
        return {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5",
                "tie_word_embeddings": self.tie_word_embeddings, "text_config": text}


class RMSNorm(nn.Module):
    """Qwen3.5's zero-centred RMSNorm: the stored weight is an offset from 1."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).to(x.dtype)


class GatedRMSNorm(nn.Module):
    """norm(x) * w * silu(z): the output norm of DeltaNet (weight stored as is, not as an offset)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * y * F.silu(z.float())).to(x.dtype)


def rope(x: torch.Tensor, pos: torch.Tensor, rot: int, theta: float) -> torch.Tensor:
    """Rotate-half RoPE on the first ``rot`` dims of x [B, heads, T, D]; pos [T]."""
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, device=x.device, dtype=torch.float32) / rot))
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    xr, xp = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], -1)
    return torch.cat([xr * cos + rotated * sin, xp], -1)


class Attention(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.c = c
        hd, nh, nkv = c.head_dim, c.num_attention_heads, c.num_key_value_heads
        self.q_proj = nn.Linear(c.hidden_size, nh * hd * 2, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, nkv * hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(hd, c.rms_norm_eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        c = self.c
        B, T, _ = x.shape
        hd, nh, nkv = c.head_dim, c.num_attention_heads, c.num_key_value_heads
        qg = self.q_proj(x).view(B, T, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(B, T, nh * hd)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, nkv, hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, nkv, hd).transpose(1, 2)
        q, k = rope(q, pos, c.rotary_dim, c.rope_theta), rope(k, pos, c.rotary_dim, c.rope_theta)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(hd))
        o = o.transpose(1, 2).reshape(B, T, nh * hd) * torch.sigmoid(gate)
        return self.o_proj(o)


def delta_rule_recurrent(q, k, v, g, beta):
    """Reference recurrence, one token at a time. q,k [B,H,T,dk] (normed, q scaled), v [B,H,T,dv], g,beta [B,H,T]."""
    B, H, T, dk = k.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    out = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        kt = k[:, :, t]
        err = v[:, :, t] - torch.einsum("bhk,bhkv->bhv", kt, S)
        S = S + kt[..., :, None] * (beta[:, :, t][..., None] * err)[..., None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))
    return torch.stack(out, 2)


def delta_rule_chunked(q, k, v, g, beta, chunk: int = 64):
    """The same recurrence computed chunk by chunk (for training speed).

    Inside a chunk, the delta-rule updates form a unit lower-triangular system (the WY/UT form of products of
    Householder-like factors): solving it once per chunk gives the values written to the state and the decayed
    keys that read the state entering the chunk, so each chunk costs a few matrix products instead of a loop.
    """
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = (F.pad(t, (0, pad)) for t in (g, beta))
    n = q.shape[2] // chunk
    q, k, v = (t.reshape(B, H, n, chunk, -1) for t in (q, k, v))
    g, beta = g.reshape(B, H, n, chunk), beta.reshape(B, H, n, chunk)
    G = g.cumsum(-1)  # log of the decay from the chunk start to each position
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    D = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # decay j -> i, i >= j
    kb = k * beta[..., None]
    A = ((kb @ k.transpose(-1, -2)) * D).tril(-1)  # how earlier updates of the chunk change what t writes
    L = A + torch.eye(chunk, device=q.device, dtype=q.dtype)
    u = torch.linalg.solve_triangular(L, v * beta[..., None], upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(L, kb * G.exp()[..., None], upper=False, unitriangular=True)
    attn = (q @ k.transpose(-1, -2)) * D
    qd = q * G.exp()[..., None]
    kd = k * (G[..., -1:] - G).exp()[..., None]
    S = q.new_zeros(B, H, dk, dv)
    outs = []
    for i in range(n):
        new_v = u[:, :, i] - w[:, :, i] @ S
        outs.append(qd[:, :, i] @ S + attn[:, :, i] @ new_v)
        S = S * G[:, :, i, -1].exp()[..., None, None] + kd[:, :, i].transpose(-1, -2) @ new_v
    o = torch.stack(outs, 2).reshape(B, H, n * chunk, dv)
    return o[:, :, :T]


class GatedDeltaNet(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.c = c
        nk, nv, dk, dv = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim
        self.key_dim, self.value_dim = nk * dk, nv * dv
        conv_dim = 2 * self.key_dim + self.value_dim
        self.in_proj_qkv = nn.Linear(c.hidden_size, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(c.hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(c.hidden_size, nv, bias=False)
        self.in_proj_a = nn.Linear(c.hidden_size, nv, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, c.linear_conv_kernel_dim, groups=conv_dim, bias=False,
                                padding=c.linear_conv_kernel_dim - 1)
        self.dt_bias = nn.Parameter(torch.ones(nv))
        self.A_log = nn.Parameter(torch.log(torch.empty(nv).uniform_(1, 16)))
        self.norm = GatedRMSNorm(dv, c.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, c.hidden_size, bias=False)
        self.recurrent = False  # True: token-by-token reference path (checks the chunked one)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.c
        B, T, _ = x.shape
        nk, nv, dk, dv = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim
        mixed = self.conv1d(self.in_proj_qkv(x).transpose(1, 2))[..., :T]
        mixed = F.silu(mixed).transpose(1, 2)
        q, k, v = mixed.split([self.key_dim, self.key_dim, self.value_dim], -1)
        r = nv // nk
        q = q.reshape(B, T, nk, dk).repeat_interleave(r, 2).transpose(1, 2).float()
        k = k.reshape(B, T, nk, dk).repeat_interleave(r, 2).transpose(1, 2).float()
        v = v.reshape(B, T, nv, dv).transpose(1, 2).float()
        q = F.normalize(q, dim=-1, eps=1e-6) / math.sqrt(dk)
        k = F.normalize(k, dim=-1, eps=1e-6)
        beta = torch.sigmoid(self.in_proj_b(x).float()).transpose(1, 2)
        g = (-self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias)).transpose(1, 2)
        with torch.autocast(x.device.type, enabled=False):  # the recurrence in fp32, as the reference kernels do
            o = (delta_rule_recurrent if self.recurrent else delta_rule_chunked)(q, k, v, g, beta)
        o = o.transpose(1, 2).to(x.dtype)  # [B, T, nv, dv]
        z = self.in_proj_z(x).view(B, T, nv, dv)
        return self.out_proj(self.norm(o, z).reshape(B, T, nv * dv))


class MLP(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: TinyConfig, kind: str) -> None:
        super().__init__()
        self.kind = kind
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        h = self.input_layernorm(x)
        h = self.linear_attn(h) if self.kind == "linear_attention" else self.self_attn(h, pos)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x))


class TextModel(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c, t) for t in c.layer_types])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class MTP(nn.Module):
    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.pre_fc_norm_embedding = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.pre_fc_norm_hidden = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.fc = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(c, "full_attention") for _ in range(c.mtp_num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, emb: torch.Tensor, h_prev: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(h_prev)], -1))
        for layer in self.layers:
            x = layer(x, pos)
        return self.norm(x)


class Qwen35MTP(nn.Module):
    """Trunk + MTP head. ``forward`` returns (trunk logits, MTP logits), both predicting token p+1 at p."""

    def __init__(self, c: TinyConfig) -> None:
        super().__init__()
        self.config = c
        self.model = nn.Module()
        self.model.language_model = TextModel(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.mtp = MTP(c)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def trunk(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeddings, final normed hidden states) of ids [B, T]."""
        lm = self.model.language_model
        pos = torch.arange(ids.shape[1], device=ids.device)
        emb = lm.embed_tokens(ids)
        x = emb
        for layer in lm.layers:
            x = layer(x, pos)
        return emb, lm.norm(x)

    def forward(self, ids: torch.Tensor, mtp: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        emb, h = self.trunk(ids)
        logits = self.lm_head(h)
        if not mtp:
            return logits, None
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)
        pos = torch.arange(ids.shape[1], device=ids.device)
        return logits, self.lm_head(self.mtp(emb, h_prev, pos))

    def set_recurrent(self, on: bool) -> None:
        for m in self.modules():
            if isinstance(m, GatedDeltaNet):
                m.recurrent = on
