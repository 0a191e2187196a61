"""Speed as a user meets it: every row is its own process, one answer, as `gguf-mtp run` is compared with
`llama-completion` and `llama-speculative-simple` (issue 24). The page cache is filled first, so no row pays the
disk; everything else a first answer pays (kernel loads, graph captures, the warm-up at load) is in its row.

    python bench/oneshot.py --model LABEL=PATH --bin LLAMA_BIN -ngl 99 -n 256 --drafts 1 2 3 4 --out o.json

Rows: llama-completion; llama-speculative-simple --spec-type draft-mtp at each k; `gguf-mtp run --no-mtp`, at
each k and with `auto`, with the warm-up at load (the default with -ngl) and, for plain, the best k and auto,
again with `--no-warmup` to show what it brings. Ratios are to llama-completion in the same run on the same file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llamacpp
from common import machine, table

PROMPT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
          "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n") * 4


def fill_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def ours(model: Path, prompt_file: Path, a: argparse.Namespace, tmp: Path, *extra: str) -> dict:
    """One `gguf-mtp run` process: its own statistics (--stats-json) and the text it printed."""
    stats = tmp / "stats.json"
    cmd = [sys.executable, "-m", "gguf_mtp_cli.main", "run", str(model), "-f", str(prompt_file), "-n",
           str(a.n_predict), "-c", str(a.ctx), "-ngl", str(a.ngl), "--stats-json", str(stats), "--force", *extra]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:])}: exit {p.returncode}: {p.stderr.decode(errors='replace')[-800:]}")
    st = json.loads(stats.read_text())
    st["wall_s"] = round(wall, 2)
    st["text"] = p.stdout.decode("utf-8", "replace")
    return st


def rows_for(label: str, model: Path, a: argparse.Namespace, tmp: Path, save) -> list[dict]:  # type: ignore[no-untyped-def]
    """The rows of one model; ``save(rows)`` after each (a time budget may stop the run between rows)."""
    fill_page_cache(model)
    prompt_file = llamacpp.write_prompt(tmp / "prompt.txt", PROMPT)
    out: list[dict] = []
    base = None
    comp = llamacpp.find_tool("llama-completion", a.bin)
    spec = llamacpp.find_tool("llama-speculative-simple", a.bin)
    if comp is not None:
        r = llamacpp.completion(comp, model, prompt_file, a.n_predict, ngl=a.ngl, ctx=a.ctx)
        base = r.tps
        out.append({"row": "llama-completion", "t/s": round(r.tps, 1), "model": label})
        save(out)
    if spec is not None:
        for k in a.drafts:
            r = llamacpp.speculative(spec, model, prompt_file, a.n_predict, k, ngl=a.ngl, ctx=a.ctx)
            out.append({"row": f"llama-speculative-simple k={k}", "t/s": round(r.tps, 1), "model": label,
                        "acceptance_at": [round(x, 3) for x in r.acceptance_at]})
            save(out)

    def add(name: str, *extra: str) -> dict:
        st = ours(model, prompt_file, a, tmp, *extra)
        row = {"row": name, "t/s": st["decode_tps"], "acceptance_at": st.get("acceptance_at"), "model": label,
               "emitted": st["emitted"], "wall_s": st["wall_s"], "_text": st["text"]}
        if base:
            row["x llama-completion"] = round(row["t/s"] / base, 3)
        out.append(row)
        save(out)
        print(f"  {label}: {name}: {row['t/s']} t/s", file=sys.stderr, flush=True)
        return row

    plain = add("run --no-mtp", "--no-mtp")
    add("run --no-mtp --no-warmup", "--no-mtp", "--no-warmup")
    fixed = [add(f"run k={k}", "--spec-draft-n-max", str(k)) for k in a.drafts]
    best = max(zip(a.drafts, fixed), key=lambda kr: kr[1]["t/s"])[0]
    add(f"run k={best} --no-warmup", "--spec-draft-n-max", str(best), "--no-warmup")
    add("run auto", "--spec-draft-n-max", "auto")
    add("run auto --no-warmup", "--spec-draft-n-max", "auto", "--no-warmup")
    plain_text = plain["_text"]
    for r in out:
        if base:
            r["x llama-completion"] = round(r["t/s"] / base, 3)
        if "_text" in r:
            r["same text as run --no-mtp"] = r.pop("_text") == plain_text
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="LABEL=PATH (or PATH); repeatable")
    ap.add_argument("--bin", help="folder with llama-completion and llama-speculative-simple")
    ap.add_argument("-ngl", "--ngl", type=int, default=99)
    ap.add_argument("-n", "--n-predict", type=int, default=256)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--drafts", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "oneshot.json")
    a = ap.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.parent / ".oneshot"
    tmp.mkdir(exist_ok=True)
    rows: list[dict] = []

    def save(current: list[dict]) -> None:
        done = [{k: v for k, v in r.items() if k != "_text"} for r in rows + current]
        a.out.write_text(json.dumps({"machine": machine(), "n_predict": a.n_predict, "rows": done}, indent=1))

    for spec in a.model:
        label, _, path = spec.rpartition("=")
        model = Path(path)
        rows += rows_for(label or model.stem, model, a, tmp, save)
        save([])
    print(table(rows, ["model", "row", "t/s", "x llama-completion", "acceptance_at", "wall_s",
                       "same text as run --no-mtp"]))


if __name__ == "__main__":
    main()
