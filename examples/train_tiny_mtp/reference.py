"""Reference numbers of a trained model, computed in PyTorch (fp32 on the bf16-rounded weights, as shipped).

- held-out next-token loss (trunk) and the MTP head's loss;
- the expected acceptance of one draft token, measured the way speculative decoding sees it: greedy
  generation from fixed held-out prompts, counting how often the MTP head's argmax equals the trunk's own
  next greedy token;
- next-token logits for a few fixed prompts (the test compares llama.cpp's against these).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from model import Qwen35MTP

N_PROMPTS, PROMPT_TOKENS, NEW_TOKENS = 16, 48, 64
N_LOGIT_PROMPTS, LOGIT_TOKENS = 4, 32


def split_docs(ids: np.ndarray, eot: int) -> list[np.ndarray]:
    cut = np.flatnonzero(ids == eot)
    return [d for d in np.split(ids, cut + 1) if d.size > 1]


def heldout_prompts(tok, heldout: np.ndarray, eot: int) -> list[str]:
    """The middle of the first held-out files long enough, decoded: readable, and not a licence header."""
    out = []
    for d in split_docs(heldout, eot):
        if d.size < 400:
            continue
        mid = d.size // 2
        text = tok.decode(d[mid:mid + PROMPT_TOKENS].tolist())
        nl = text.find("\n")  # start at a line boundary, as a user's prompt would
        out.append(text[nl + 1:] if 0 <= nl < 40 else text)
        if len(out) == N_PROMPTS:
            break
    return out


@torch.no_grad()
def heldout_loss(model: Qwen35MTP, ids: np.ndarray, device: str, window: int = 512) -> tuple[float, float]:
    n = (ids.size - 1) // window
    x = torch.from_numpy(ids[: n * window + 1].astype(np.int64)).to(device)
    tl = ml = 0.0
    for i in range(0, n, 16):
        rows = torch.stack([x[j * window: (j + 1) * window + 1] for j in range(i, min(n, i + 16))])
        logits, mlog = model(rows[:, :-1])
        tl += F.cross_entropy(logits.flatten(0, 1).float(), rows[:, 1:].flatten(), reduction="sum").item()
        ml += F.cross_entropy(mlog.flatten(0, 1).float(), rows[:, 1:].flatten(), reduction="sum").item()
    return tl / (n * window), ml / (n * window)


@torch.no_grad()
def greedy_acceptance(model: Qwen35MTP, prompts: list[list[int]], eog: set[int], device: str) -> dict:
    """Greedy-generate NEW_TOKENS per prompt with the trunk; the draft made after emitting token p (from the
    token p and the hidden state of p-1) is accepted when it equals the trunk's next greedy token."""
    hits = total = 0
    per_prompt = []
    for p in prompts:
        seq = list(p)
        for _ in range(NEW_TOKENS):
            logits, _ = model(torch.tensor([seq], device=device), mtp=False)
            t = int(logits[0, -1].argmax())
            seq.append(t)
            if t in eog:
                break
        _, mlog = model(torch.tensor([seq], device=device))
        drafts = mlog[0].argmax(-1).tolist()
        # drafts[q] guesses seq[q+1]; drafting starts at the last prompt token
        pos = range(len(p) - 1, len(seq) - 1)
        h = sum(drafts[q] == seq[q + 1] for q in pos)
        per_prompt.append({"generated": seq[len(p):], "drafts": len(pos), "accepted": h})
        hits, total = hits + h, total + len(pos)
    return {"acceptance": hits / max(1, total), "drafts": total, "per_prompt": per_prompt}


def write_reference(model: Qwen35MTP, tok, heldout: np.ndarray, out: Path, device: str, extra: dict) -> dict:
    model.eval()
    eot = tok.token_to_id("<|endoftext|>")
    eog = {eot, tok.token_to_id("<|im_end|>")}
    texts = heldout_prompts(tok, heldout, eot)
    prompts = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    loss, mtp_loss = heldout_loss(model, heldout, device)
    acc = greedy_acceptance(model, prompts, eog, device)
    lp = [p[:LOGIT_TOKENS] for p in prompts[:N_LOGIT_PROMPTS]]
    with torch.no_grad():
        logits = np.stack([model(torch.tensor([p], device=device), mtp=False)[0][0].float().cpu().numpy()
                           for p in lp])
    np.savez_compressed(out / "reference_logits.npz", tokens=np.asarray(lp, dtype=np.int32),
                        logits=logits.astype(np.float32))
    ref = {
        "heldout_loss": loss, "heldout_mtp_loss": mtp_loss, "heldout_tokens": int(heldout.size),
        "acceptance_k1": acc["acceptance"], "acceptance_drafts": acc["drafts"],
        "new_tokens": NEW_TOKENS, "prompts": texts, "prompt_tokens": prompts,
        "generated": [r["generated"] for r in acc["per_prompt"]],
        "logits_file": "reference_logits.npz", "logit_prompts": N_LOGIT_PROMPTS, "logit_tokens": LOGIT_TOKENS,
        **extra,
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def round_to_bf16(model: Qwen35MTP) -> None:
    """Make the fp32 weights exactly the bf16 values that are shipped."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
