"""Speed as a user meets it: every row is its own process, one answer, as `gguf-mtp run` is compared with `llama-
completion` and `llama-speculative-simple` (issue 24). The page cache is filled first, so no row pays the disk;
everything else a first answer pays (kernel loads, graph captures, the warm-up at load) is in its row.

    python -m bench.oneshot --model LABEL=PATH --bin LLAMA_BIN -ngl 99 -n 256 --drafts 1 2 3 4 --out o.json

Rows: llama-completion; llama-speculative-simple --spec-type draft-mtp at each k; `gguf-mtp run --no-mtp`, at each k
and with `auto`, with the warm-up at load (the default with -ngl) and, with ``--no-warmup-rows``, plain, the best k
and auto again with `--no-warmup` to show what it brings. Ratios are to llama-completion in the same run on the same
file. ``--perf`` adds plain, the best k and auto again with per-phase timings (``run --perf``: each decode waited
for, so a little slower; again under each ``--env-row``) and the memory-bound limit of a plain token and of a draft
(bytes the weights read, at the device's nominal bandwidth). ``--env-row NAME=VALUE[,NAME=VALUE...]`` adds
llama.cpp's MTP driver at its best k, plain, the best k and auto with those variables set
(``GGUF_MTP_DRAFT_CHAIN=0``: one decode a draft on a build that chains them). Auto rows keep what auto did
(``auto``: changes of length, runs, the measured cost of a change). ``--repeat N`` runs each `run` row in N
processes and keeps the median. ``--plain-pairs N`` alternates N llama-completion and `run --no-mtp --perf`
processes and compares their medians, the decode alone and the host's time between decodes (``--drafts`` with no
value: only that). ``--ab A B`` runs the ``--ab-rows`` (default: the best k and auto) in ``--ab-n`` pairs of
processes, A's environment then B's each time, and compares the medians: an A/B that a machine's drift between
processes falls on evenly.
``--before DIR`` adds plain, the best k and
auto run from another copy of the package (DIR holds ``gguf_mtp`` and ``gguf_mtp_cli``): a before/after on the same
machine. A model whose file names a draft vocabulary (``--draft-vocab``) also gets llama.cpp's MTP driver at its
best k, the best k and its ``--perf`` row with ``GGUF_MTP_DRAFT_VOCAB=0``: the patched library's full-head drafts
beside.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import llamacpp
from bench.common import machine, table

PROMPT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
          "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n") * 4


def fill_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12}  # nominal HBM bytes/s by device name


def weight_bytes(model: Path) -> dict[str, float]:
    """Bytes of weights one plain token reads (trunk and LM head; experts at their used share) and one draft reads
    (the MTP block, experts likewise, and the LM head the drafts use)."""
    from gguf_mtp.ggufio.model import GGUFModel

    m = GGUFModel(model)
    n_mtp = int(m.arch_get("{arch}.nextn_predict_layers", 0) or 0)
    n_trunk = int(m.arch_get("{arch}.block_count", 0)) - n_mtp
    used = int(m.arch_get("{arch}.expert_used_count", 0) or 0)
    n_exp = int(m.arch_get("{arch}.expert_count", 0) or 0)
    plain = draft = 0.0
    lm_head = 0.0
    draft_head = 0.0
    for name, t in m.tensors.items():
        b = float(t.info.nbytes) * (used / n_exp if n_exp and "_exps." in name else 1.0)
        if name == "token_embd.weight":
            lm_head = lm_head or b  # tied embeddings: the LM head
        elif name == "output.weight":
            lm_head = b
        elif name.startswith("blk."):
            layer = int(name.split(".")[1])
            if layer < n_trunk:
                plain += b
            elif "shared_head_head" in name:
                draft_head = b
            elif "embed_tokens" not in name:
                draft += b
    return {"plain": plain + lm_head, "draft": draft + (draft_head or lm_head)}


def has_draft_vocab(model: Path) -> bool:
    """Whether the file names a draft vocabulary (``gguf-mtp ... --draft-vocab``)."""
    from gguf_mtp.draft_vocab import KEY
    from gguf_mtp.ggufio.model import GGUFModel

    return GGUFModel(model).get(KEY) is not None


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return ""


def process_env(tmp: Path, package: Path | None = None,
                env_extra: dict[str, str] | None = None) -> tuple[dict[str, str], Path]:
    """Environment and working folder of a `run` process. ``python -m`` puts its working folder first on sys.path,
    so a process started in the repository imports the repository's gguf_mtp whatever PYTHONPATH says (an A/B of
    two packages measured one twice): it starts in ``tmp`` instead, with ``package`` (a folder holding another
    gguf_mtp and gguf_mtp_cli) first on PYTHONPATH, then PYTHONPATH (``env_extra``'s, where it sets one), and the
    repository last, for a gguf_mtp nothing installed provides."""
    env = dict(os.environ, **(env_extra or {}))
    path = [str(package.resolve())] if package is not None else []
    path += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    path.append(str(Path(__file__).resolve().parents[1]))
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env, tmp.resolve()


def ours(model: Path, prompt_file: Path, a: argparse.Namespace, tmp: Path, *extra: str,
         package: Path | None = None, env_extra: dict[str, str] | None = None) -> dict:
    """One `gguf-mtp run` process: its own statistics (--stats-json) and the text it printed. ``package``: run
    the copy of gguf_mtp (and gguf_mtp_cli) in that folder instead."""
    stats = (tmp / "stats.json").resolve()
    cmd = [sys.executable, "-m", "gguf_mtp_cli.main", "run", str(model.resolve()), "-f", str(prompt_file.resolve()),
           "-n", str(a.n_predict), "-c", str(a.ctx), "-ngl", str(a.ngl), "--stats-json", str(stats), "--force", *extra]
    env, cwd = process_env(tmp, package, env_extra)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, timeout=600, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:])}: exit {p.returncode}: {p.stderr.decode(errors='replace')[-800:]}")
    st = json.loads(stats.read_text())
    st["wall_s"] = round(wall, 2)
    st["text"] = p.stdout.decode("utf-8", "replace")
    return st


def env_vars(spec: str, option: str = "--env-row") -> dict[str, str]:
    """``NAME=VALUE[,NAME=VALUE...]`` as a dict; a malformed item stops with one line naming ``option``."""
    env = {}
    for item in spec.split(","):
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise SystemExit(f"error: {option} {spec!r}: write NAME=VALUE[,NAME=VALUE...]")
        env[name.strip()] = value
    return env


def pairs_summary(lc_tps: list[float], ours: list[tuple[float, float, float]]) -> dict:
    """Plain decoding, llama-completion against `run --no-mtp --perf`, one process each, in alternating pairs (so a
    machine's drift between processes falls on both). ``ours``: (t/s, step ms, decode ms) a process. llama-completion's
    t/s counts its decodes only (its ``eval time``: each llama_decode to its synchronisation); our decode ms is the
    same span, and our step ms adds what the host does between two decodes (reading the token, Python)."""
    med = statistics.median
    lc_ms = [1e3 / t for t in lc_tps if t > 0]
    return {"t/s": round(med(t for t, _, _ in ours), 2), "llama-completion t/s": round(med(lc_tps), 2),
            "x llama-completion (medians)": round(med(t for t, _, _ in ours) / med(lc_tps), 3),
            "x each pair": [round(t / b, 3) for (t, _, _), b in zip(ours, lc_tps)],
            "decode ms/token": round(med(d for _, _, d in ours), 3),
            "llama-completion eval ms/token": round(med(lc_ms), 3) if lc_ms else None,
            "host ms/token": round(med(s - d for _, s, d in ours), 3),
            "t/s each": [round(t, 2) for t, _, _ in ours], "llama-completion t/s each": [round(t, 1) for t in lc_tps]}


def row_args(item: str, best: int) -> tuple[str, ...] | None:
    """The `run` options of the row named ``item``: ``plain``, ``best`` (the best fixed k, ``best``), ``auto`` or a
    draft length; None for any other name."""
    extra = {"plain": ("--no-mtp",), "best": ("--spec-draft-n-max", str(best)),
             "auto": ("--spec-draft-n-max", "auto")}.get(item)
    if extra is None and item.isdigit():
        extra = ("--spec-draft-n-max", item)
    return extra


def alternating(sides: Sequence[Callable[[], dict]], n: int) -> dict:
    """``n`` pairs of processes, side A then side B each time (each side a call that runs one process and returns
    its statistics: ``decode_tps``, and ``text`` and ``auto`` where it has them), so a machine's drift falls on
    both: the medians, B over A, each process's t/s, what auto did in each, and ``_text`` where the processes
    printed text (None where they disagreed: never "same text")."""
    tps: tuple[list[float], list[float]] = ([], [])  # A's, B's (by side: the two may run the same thing)
    autos: tuple[list, list] = ([], [])
    texts: set[str] = set()
    for _ in range(max(1, n)):
        for side, run in enumerate(sides):
            st = run()
            tps[side].append(st["decode_tps"])
            if "text" in st:
                texts.add(st["text"])
            if st.get("auto"):
                autos[side].append(st["auto"])
    ta, tb = tps
    row = {"t/s": statistics.median(tb), "t/s A": statistics.median(ta),
           "x B/A (medians)": round(statistics.median(tb) / statistics.median(ta), 3),
           "t/s each A": ta, "t/s each B": tb}
    if any(autos):
        row["auto each A"], row["auto each B"] = autos
    if texts:
        row["_text"] = texts.pop() if len(texts) == 1 else None
    return row


def versus_row(items: list[str], best: int, model: Path, prompt_file: Path, label: str, a: argparse.Namespace,
               tmp: Path) -> dict:
    """``--versus A B``: two `run` rows (each ``plain``, ``best``, ``auto`` or a k) in ``--ab-n`` alternating pairs of
    processes, in the environment as it is: auto against the best fixed k with a machine's drift falling on both."""
    args = [row_args(item, best) for item in items]
    if any(x is None for x in args):
        raise SystemExit(f"error: --versus {' '.join(items)}: use plain, best, auto or a draft length")
    sides = [lambda extra=extra: ours(model, prompt_file, a, tmp, *extra) for extra in args]
    return {"row": f"versus: {' '.join(args[0] or ())} | {' '.join(args[1] or ())}", "model": label,
            **alternating(sides, a.ab_n)}


def ab_row(item: str, pair: list[str], best: int, spec_tps: dict[int, float], spec: Path | None, model: Path,
           prompt_file: Path, label: str, a: argparse.Namespace, tmp: Path, comp: Path | None = None) -> dict:
    """``--ab A B`` (``pair``): one row (``plain``, ``best``, ``auto``, a k, ``spec``: llama.cpp's MTP driver at
    its best k, or ``lc``: llama-completion, ``comp``) in ``--ab-n`` pairs of processes, A then B each time (``-``
    for the environment as it is): :func:`alternating`'s medians and what each process did."""
    envs = [{} if s == "-" else env_vars(s, "--ab") for s in pair]
    extra = row_args(item, best)
    if extra is None and not (item == "spec" and spec is not None and spec_tps) and \
            not (item == "lc" and comp is not None):
        raise SystemExit(f"error: --ab-rows {item!r}: use plain, best, auto, a draft length, spec (with "
                         "llama-speculative-simple and --drafts) or lc (with llama-completion)")
    k_spec = max(spec_tps, key=spec_tps.__getitem__) if spec_tps else 0

    def side(env: dict[str, str]) -> Callable[[], dict]:
        if item == "lc" and extra is None:
            assert comp is not None
            return lambda: {"decode_tps": round(llamacpp.completion(comp, model, prompt_file, a.n_predict, ngl=a.ngl,
                                                                     ctx=a.ctx, env=llamacpp.tool_env(env)).tps, 2)}
        if extra is None:
            assert spec is not None
            return lambda: {"decode_tps": round(llamacpp.speculative(spec, model, prompt_file, a.n_predict, k_spec,
                                                                      ngl=a.ngl, ctx=a.ctx,
                                                                      env=llamacpp.tool_env(env)).tps, 2)}
        return lambda: ours(model, prompt_file, a, tmp, *extra, env_extra=env or None)

    what = (f"run {' '.join(extra)}" if extra is not None else "llama-completion" if item == "lc"
            else f"llama-speculative-simple k={k_spec}")
    return {"row": f"A/B {what}: {pair[0]} | {pair[1]}", "model": label,
            **alternating([side(env) for env in envs], a.ab_n)}


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
        out.append({"row": "llama-completion", "t/s": round(r.tps, 1), "model": label,
                    "t/s eval+sampling": round(r.tps_with_sampling, 1)})
        save(out)
    if a.plain_pairs and comp is not None:  # plain decoding against llama-completion, process for process
        lc, mine = [], []
        for _ in range(a.plain_pairs):
            lc.append(llamacpp.completion(comp, model, prompt_file, a.n_predict, ngl=a.ngl, ctx=a.ctx).tps)
            st = ours(model, prompt_file, a, tmp, "--no-mtp", "--perf")
            bd = st.get("breakdown") or {}
            mine.append((st["decode_tps"], bd.get("step_ms", 0.0), bd.get("verify_ms", 0.0)))
        out.append({"row": f"plain pairs x{a.plain_pairs}", "model": label, **pairs_summary(lc, mine)})
        save(out)
        print(f"  {label}: plain pairs: {json.dumps(out[-1])}", file=sys.stderr, flush=True)
    if not a.drafts:  # pairs only
        return out
    spec_tps: dict[int, float] = {}  # llama.cpp's MTP driver: t/s at each k
    if spec is not None:
        for k in a.spec_drafts or a.drafts:
            r = llamacpp.speculative(spec, model, prompt_file, a.n_predict, k, ngl=a.ngl, ctx=a.ctx)
            spec_tps[k] = r.tps
            out.append({"row": f"llama-speculative-simple k={k}", "t/s": round(r.tps, 1), "model": label,
                        "acceptance_at": [round(x, 3) for x in r.acceptance_at]})
            save(out)

    def add(name: str, *extra: str, package: Path | None = None, env_extra: dict[str, str] | None = None) -> dict:
        runs = [ours(model, prompt_file, a, tmp, *extra, package=package, env_extra=env_extra)
                for _ in range(max(1, a.repeat))]
        rates = [r["decode_tps"] for r in runs]
        st = sorted(runs, key=lambda r: r["decode_tps"])[(len(runs) - 1) // 2]  # the median process (lower one)
        row = {"row": name, "t/s": st["decode_tps"], "acceptance_at": st.get("acceptance_at"), "model": label,
               "emitted": st["emitted"], "wall_s": st["wall_s"], "_text": st["text"]}
        if len(runs) > 1:
            row["t/s each"] = rates
            if any(r["text"] != st["text"] for r in runs):
                row["_text"] = None  # processes disagreed: never "same text"
        if st.get("breakdown"):
            row["breakdown"] = st["breakdown"]
            row["steps"] = st.get("steps")
        if st.get("auto"):  # what auto did: changes of length, runs, the measured cost of a change
            row["auto"] = st["auto"]
            if len(runs) > 1:  # every process's: a slow one shows how it went wrong
                row["auto each"] = [r.get("auto") for r in runs]
        if base:
            row["x llama-completion"] = round(row["t/s"] / base, 3)
        out.append(row)
        save(out)
        print(f"  {label}: {name}: {row['t/s']} t/s", file=sys.stderr, flush=True)
        return row

    def spec_best(name: str, env: dict[str, str]) -> None:
        """llama.cpp's MTP driver again at its best k, with ``env`` set: the row ``... k=K, name``."""
        if not spec_tps:
            return
        k_spec = max(spec_tps, key=spec_tps.__getitem__)
        r = llamacpp.speculative(spec, model, prompt_file, a.n_predict, k_spec, ngl=a.ngl, ctx=a.ctx,
                                 env=llamacpp.tool_env(env))
        out.append({"row": f"llama-speculative-simple k={k_spec}, {name}", "t/s": round(r.tps, 1), "model": label,
                    "acceptance_at": [round(x, 3) for x in r.acceptance_at]})
        save(out)

    plain = add("run --no-mtp", "--no-mtp")
    fixed = [add(f"run k={k}", "--spec-draft-n-max", str(k)) for k in a.drafts]
    best = max(zip(a.drafts, fixed), key=lambda kr: kr[1]["t/s"])[0]
    add("run auto", "--spec-draft-n-max", "auto")
    for items in a.versus or []:  # two rows in alternating processes: auto against the best k, say
        out.append(versus_row(items, best, model, prompt_file, label, a, tmp))
        save(out)
        print(f"  {label}: {out[-1]['row']}: {json.dumps({k: v for k, v in out[-1].items() if k != '_text'})}",
              file=sys.stderr, flush=True)
    if a.no_warmup_rows:
        add("run --no-mtp --no-warmup", "--no-mtp", "--no-warmup")
        add(f"run k={best} --no-warmup", "--spec-draft-n-max", str(best), "--no-warmup")
        add("run auto --no-warmup", "--spec-draft-n-max", "auto", "--no-warmup")
    for env_row in a.env_row or []:  # the same rows under another environment (GGUF_MTP_DRAFT_CHAIN=0)
        env = env_vars(env_row)
        spec_best(env_row, env)  # llama.cpp's driver runs the same library: its best k under that environment too
        add(f"run --no-mtp, {env_row}", "--no-mtp", env_extra=env)
        add(f"run k={best}, {env_row}", "--spec-draft-n-max", str(best), env_extra=env)
        add(f"run auto, {env_row}", "--spec-draft-n-max", "auto", env_extra=env)
    for i, pair in enumerate(a.ab or []):  # A/Bs in alternating processes: a machine's drift falls on both sides
        specs = a.ab_rows or ["best,auto"]
        for item in specs[min(i, len(specs) - 1)].split(","):
            out.append(ab_row(item.strip(), pair, best, spec_tps, spec, model, prompt_file, label, a, tmp, comp))
            save(out)
            print(f"  {label}: {out[-1]['row']}: {json.dumps({k: v for k, v in out[-1].items() if k != '_text'})}",
                  file=sys.stderr, flush=True)
    if a.before:
        add("run --no-mtp (before)", "--no-mtp", package=a.before)
        add(f"run k={best} (before)", "--spec-draft-n-max", str(best), package=a.before)
        add("run auto (before)", "--spec-draft-n-max", "auto", package=a.before)
    if has_draft_vocab(model):  # the same with the patched library's draft vocabulary switched off
        off = {"GGUF_MTP_DRAFT_VOCAB": "0"}
        spec_best("draft vocab off", off)
        add(f"run k={best}, draft vocab off", "--spec-draft-n-max", str(best), env_extra=off)
        if a.perf:
            add(f"run k={best} --perf, draft vocab off", "--spec-draft-n-max", str(best), "--perf", env_extra=off)
    if a.perf:  # where each row's step goes: auto's beside the best k's shows what choosing costs at one length
        for env_row in ["", *(a.env_row or [])]:
            env, tag = (env_vars(env_row), f", {env_row}") if env_row else ({}, "")
            add(f"run --no-mtp --perf{tag}", "--no-mtp", "--perf", env_extra=env)
            add(f"run k={best} --perf{tag}", "--spec-draft-n-max", str(best), "--perf", env_extra=env)
            add(f"run auto --perf{tag}", "--spec-draft-n-max", "auto", "--perf", env_extra=env)
        wb = weight_bytes(model)
        bw = next((v for k, v in BANDWIDTH.items() if k in a.gpu), 0.0)
        if bw:
            limit = {"row": "memory-bound limit (plain token / one draft)", "model": label,
                     "t/s": round(bw / wb["plain"], 1),
                     "breakdown": {"plain_ms": round(1e3 * wb["plain"] / bw, 3),
                                   "draft_ms": round(1e3 * wb["draft"] / bw, 3),
                                   "plain_gb": round(wb["plain"] / 1e9, 2), "draft_gb": round(wb["draft"] / 1e9, 2),
                                   "device": a.gpu}}
            out.append(limit)
            save(out)
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
    ap.add_argument("--drafts", type=int, nargs="*", default=[1, 2, 3, 4],
                    help="k for the `run` rows; none: only llama-completion and --plain-pairs")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "oneshot.json")
    ap.add_argument("--no-warmup-rows", action="store_true", help="also plain, best k and auto with --no-warmup")
    ap.add_argument("--perf", action="store_true", help="also plain, best k and auto with per-phase timings (--perf), "
                    "under each --env-row too")
    ap.add_argument("--before", type=Path, help="a folder with another gguf_mtp and gguf_mtp_cli: plain, best k "
                    "and auto from it too")
    ap.add_argument("--repeat", type=int, default=1, help="processes per `run` row; the row keeps the median's "
                    "t/s and every process's (rows move by several percent between processes)")
    ap.add_argument("--env-row", action="append", metavar="NAME=VALUE[,NAME=VALUE...]",
                    help="also llama.cpp's MTP at its best k, plain, the best k and auto with these environment "
                    "variables set; repeatable")
    ap.add_argument("--plain-pairs", type=int, default=0, metavar="N",
                    help="N alternating pairs of llama-completion and `run --no-mtp --perf` processes: medians, "
                    "each pair's ratio, decode and host ms a token")
    ap.add_argument("--ab", nargs=2, action="append", metavar=("A", "B"),
                    help="an A/B of the --ab-rows in alternating processes: A's environment, then B's, --ab-n times "
                    "(each NAME=VALUE[,NAME=VALUE...], or - for the environment as it is); repeatable")
    ap.add_argument("--ab-rows", action="append", help="which rows an A/B runs: plain, best, auto, a draft "
                    "length, spec (llama.cpp's MTP driver at its best k), lc (llama-completion); comma-separated; one "
                    "per --ab, in order "
                    "(the last one for the A/Bs after it; default best,auto)")
    ap.add_argument("--versus", nargs=2, action="append", metavar=("A", "B"),
                    help="two rows (plain, best, auto or a draft length) in --ab-n alternating pairs of processes, "
                    "after the auto row: `--versus best auto` measures auto against the best fixed k with the "
                    "machine's drift on both; repeatable")
    ap.add_argument("--ab-n", type=int, default=4, help="pairs of processes per A/B or --versus row")
    ap.add_argument("--spec-drafts", type=int, nargs="+", help="k for llama-speculative-simple (default: --drafts)")
    a = ap.parse_args()
    a.gpu = gpu_name()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.parent / ".oneshot"
    tmp.mkdir(exist_ok=True)
    rows: list[dict] = []

    def save(current: list[dict]) -> None:
        done = [{k: v for k, v in r.items() if k != "_text"} for r in rows + current]
        a.out.write_text(json.dumps({"machine": machine(), "gpu": a.gpu, "n_predict": a.n_predict, "rows": done},
                                    indent=1))

    for spec in a.model:
        label, _, path = spec.rpartition("=")
        model = Path(path)
        rows += rows_for(label or model.stem, model, a, tmp, save)
        save([])
    print(table(rows, ["model", "row", "t/s", "x llama-completion", "t/s eval+sampling", "acceptance_at", "wall_s",
                       "same text as run --no-mtp"]))
    for r in rows:
        if r.get("breakdown"):
            print(f"{r['model']}: {r['row']}: {json.dumps(r['breakdown'])}")


if __name__ == "__main__":
    main()
