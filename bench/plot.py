"""Plot a side-by-side benchmark JSON (``side_by_side.py``) as a PNG next to it; needs matplotlib (the ``plot``
extra). One row per model: tokens/s by draft length, tokens per step by draft length, acceptance by draft
position at the longest draft, gguf-mtp against llama.cpp's driver, with both plain baselines as lines.

    python -m bench.plot results/side-by-side.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _by_k(rows: list[dict], who: str, field: str) -> tuple[list[int], list[float]]:
    pts = sorted((r["k"], r[field]) for r in rows if r.get("who") == who and isinstance(r.get("k"), int)
                 and r["k"] > 0 and r.get(field) is not None and "," not in r["mode"])
    return [k for k, _ in pts], [v for _, v in pts]


def plot_side_by_side(path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    d = json.loads(path.read_text())
    models = d["models"]
    fig, axes = plt.subplots(len(models), 3, figsize=(15, 3.8 * len(models)), squeeze=False)
    for row, m in zip(axes, models):
        rows = m["rows"]
        ax = row[0]
        for who, style in (("gguf-mtp", "o-"), ("llama.cpp", "s--")):
            ks, v = _by_k(rows, who, "t/s")
            if ks:
                ax.plot(ks, v, style, label=f"{who} MTP")
        for mode, color in (("llama-completion", "grey"), ("run --no-mtp", "tab:blue")):
            r = next((r for r in rows if r["mode"] == mode), None)
            if r:
                ax.axhline(r["t/s"], color=color, ls=":", label=mode)
        auto = next((r for r in rows if r["mode"] == "run auto, best"), None)
        if auto:
            ax.axhline(auto["t/s"], color="tab:green", ls="-.", label="run auto (best)")
        ks_all = sorted({r["k"] for r in rows if isinstance(r.get("k"), int) and r["k"] > 0})
        ax.set_xticks(ks_all)
        ax.set(title=f"{m['label']}: decode tokens/s", xlabel="draft length k", ylabel="t/s")
        ax.legend(fontsize=7)
        ax = row[1]
        for who, style in (("gguf-mtp", "o-"), ("llama.cpp", "s--")):
            ks, v = _by_k(rows, who, "tok/step")
            if ks:
                ax.plot(ks, v, style, label=who)
        ax.plot([1, max([1] + [r["k"] for r in rows if isinstance(r.get("k"), int)])], [2, 1 + max(
            [1] + [r["k"] for r in rows if isinstance(r.get("k"), int)])], color="grey", ls=":", label="all accepted")
        ax.set_xticks(ks_all)
        ax.set(title="tokens per target step", xlabel="draft length k", ylabel="tokens/step")
        ax.legend(fontsize=7)
        ax = row[2]
        width = 0.38
        for j, who in enumerate(("gguf-mtp", "llama.cpp")):
            cands = [r for r in rows if r.get("who") == who and isinstance(r.get("k"), int) and r["k"] > 0
                     and r.get("acceptance_at") and "," not in r["mode"]]
            if not cands:
                continue
            r = max(cands, key=lambda r: r["k"])
            acc = r["acceptance_at"]
            ax.bar([i + 1 + (j - 0.5) * width for i in range(len(acc))], [100 * x for x in acc], width,
                   label=f"{who} (k={r['k']})")
        ax.set_xticks(ks_all)
        ax.set(title="acceptance by draft position", xlabel="position", ylabel="% of steps", ylim=(0, 105))
        ax.legend(fontsize=7)
    fig.suptitle(f"{d.get('device', '')}, {d.get('n_predict', '')} tokens, best of {d.get('repeats', '')}")
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str]) -> int:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("error: bench/plot.py needs matplotlib: pip install matplotlib (or pip install -e '.[plot]'); "
              "`gguf-mtp plot FILE` draws the same files", file=sys.stderr)
        return 2
    for p in argv:
        print(plot_side_by_side(p))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
