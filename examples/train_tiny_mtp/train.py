"""Train the tiny Qwen3.5 model and its MTP head (GPU), then write the checkpoint and reference numbers.

    python examples/train_tiny_mtp/corpus.py                       # CPU: corpus + tokenizer -> work/
    python examples/train_tiny_mtp/train.py --minutes 8 --out OUT  # GPU: train, export, reference

Objective: next-token cross-entropy of the trunk plus ``--mtp-weight`` times the MTP head's (the head sees
the trunk's hidden state at t and the embedding of token t+1 and predicts token t+2). Seeded; the step count
is fixed by ``--steps`` or derived once from ``--minutes`` and the measured step rate (recorded in
training.json, so a rerun with ``--steps`` repeats the run). The checkpoint kept is the one with the best
held-out loss.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from export import save_checkpoint
from model import Qwen35MTP, TinyConfig
from reference import round_to_bf16, write_reference


def batches(ids: torch.Tensor, batch: int, seq: int, gen: torch.Generator):
    while True:
        off = torch.randint(0, ids.numel() - seq - 1, (batch,), generator=gen)
        idx = off[:, None] + torch.arange(seq + 1)
        yield ids[idx]


@torch.no_grad()
def quick_eval(model: Qwen35MTP, held: torch.Tensor, seq: int, n: int = 48) -> tuple[float, float]:
    model.eval()
    rows = torch.stack([held[i * seq: (i + 1) * seq + 1] for i in range(min(n, (held.numel() - 1) // seq))])
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=rows.is_cuda):
        lg, ml = model(rows[:, :-1])
    t = F.cross_entropy(lg.flatten(0, 1).float(), rows[:, 1:].flatten()).item()
    m = F.cross_entropy(ml.flatten(0, 1).float(), rows[:, 1:].flatten()).item()
    model.train()
    return t, m


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="train the tiny Qwen3.5 + MTP model")
    ap.add_argument("--work", type=Path, default=Path(__file__).parent / "work")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (0: derive from --minutes)")
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--mtp-weight", type=float, default=0.5)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model, for checking the pipeline on CPU")
    a = ap.parse_args(argv)

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(a.seed)
    train_ids = torch.from_numpy(np.fromfile(a.work / "train.u16", dtype=np.uint16).astype(np.int64))
    held_np = np.fromfile(a.work / "heldout.u16", dtype=np.uint16)
    held = torch.from_numpy(held_np.astype(np.int64)).to(dev)
    cfg = TinyConfig(num_hidden_layers=4, intermediate_size=256) if a.tiny else TinyConfig()
    model = Qwen35MTP(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev == "cuda")
    gen = torch.Generator().manual_seed(a.seed)
    data = batches(train_ids, a.batch, a.seq, gen)
    torch.backends.cuda.matmul.allow_tf32 = True
    a.out.mkdir(parents=True, exist_ok=True)
    log = (a.out / "train_log.jsonl").open("w")

    steps, warm = a.steps, 100
    best, best_state, t0, step = math.inf, None, time.time(), 0
    curve = []
    while True:
        if steps == 0 and step == 40:  # derive the step count once from the measured rate
            rate = 20 / (time.time() - t_probe)
            steps = max(100, int(rate * a.minutes * 60))
            print(f"{rate:.1f} steps/s -> {steps} steps", flush=True)
        if step == 20:
            t_probe = time.time()
        total = steps or 10**9
        if steps and step >= steps:
            break
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / total))))
        for g in opt.param_groups:
            g["lr"] = lr
        x = next(data).to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev == "cuda"):
            lg, ml = model(x[:, :-1])
        lt = F.cross_entropy(lg.flatten(0, 1).float(), x[:, 1:].flatten())
        lm = F.cross_entropy(ml.flatten(0, 1).float(), x[:, 1:].flatten())
        loss = lt + a.mtp_weight * lm
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % a.eval_every == 0 or step == steps:
            ht, hm = quick_eval(model, held, a.seq)
            rec = {"step": step, "seconds": round(time.time() - t0, 1), "lr": lr, "train_loss": lt.item(),
                   "train_mtp_loss": lm.item(), "heldout_loss": ht, "heldout_mtp_loss": hm}
            curve.append(rec)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
            if ht + hm < best:
                best = ht + hm
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    train_seconds = time.time() - t0
    if best_state is not None:
        model.load_state_dict(best_state)
    model.float()
    round_to_bf16(model)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(a.work / "tokenizer.json"))
    man = json.loads((a.work / "manifest.json").read_text())
    meta = {"params": n_params, "steps": steps, "batch": a.batch, "seq": a.seq, "lr": a.lr,
            "mtp_weight": a.mtp_weight, "seed": a.seed, "train_seconds": round(train_seconds, 1),
            "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__,
            "train_tokens": man["train_tokens"], "tokens_seen": steps * a.batch * a.seq,
            "corpus": {k: man[k] for k in ("roots", "n_train_files", "n_heldout_files", "heldout_tokens")},
            "best_step": min(curve, key=lambda r: r["heldout_loss"] + r["heldout_mtp_loss"])["step"] if curve else None,
            "curve": curve}
    save_checkpoint(model, a.work / "tokenizer.json", a.out, {"gguf_mtp_trained_steps": str(steps)})
    ref = write_reference(model, tok, held_np, a.out, dev, {"training": meta})
    print(f"held-out loss {ref['heldout_loss']:.3f} (MTP {ref['heldout_mtp_loss']:.3f}), "
          f"acceptance k=1 {ref['acceptance_k1']:.3f} over {ref['acceptance_drafts']} drafts; "
          f"{n_params / 1e6:.2f} M params, {steps} steps in {train_seconds:.0f} s -> {a.out}")


if __name__ == "__main__":
    main()
