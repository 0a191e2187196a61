"""``gguf-mtp plot``: acceptance by draft position and decode speed by draft length, as a PNG.

Reads what ``gguf-mtp run --stats-json`` writes (one run: its draft length is ``n_draft_max``; give one file per
draft length to see speed against it) and the benchmarks' JSON (``bench/oneshot.py``, ``bench/side_by_side.py``:
rows with a draft length ``k``, tokens/s and acceptance by position). Every file is untrusted: anything else is a
one-line error naming the file and the key. Needs matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FormatError, GgufMtpError
from .files import open_input
from .ggufio.atomic import check_output, write_bytes

MAX_BYTES = 16 << 20  # a stats file is a few kB; a benchmark's a few hundred
MAX_POSITIONS = 64  # draft positions drawn (llama.cpp drafts at most a few dozen)
MAX_SERIES = 24  # lines on one chart before it stops being readable
MISSING = "plotting needs matplotlib: pip install matplotlib (or the plot extra: pip install -e '.[plot]')"


@dataclass
class Point:
    k: int  # draft length (0: plain decoding)
    tps: float | None  # decode tokens/s
    acceptance_at: list[float] = field(default_factory=list)  # 0-1, by draft position


@dataclass
class Series:
    label: str
    points: list[Point] = field(default_factory=list)
    steps_by_k: dict[int, int] = field(default_factory=dict)  # a run's steps by the draft length it used
    run: bool = False  # from run --stats-json: one point, merged with the other runs' into one line
    #: a run whose draft length varied (``--spec-draft-n-max auto``): no single length to draw its speed at
    adaptive: bool = False

    @property
    def mean_k(self) -> float:
        n = sum(self.steps_by_k.values())
        return sum(k * c for k, c in self.steps_by_k.items()) / n if n else 0.0


def _read(path: Path) -> Any:
    try:
        with open_input(path, "statistics file") as fh:  # regular files only: a FIFO would block forever
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_BYTES:
                raise FormatError(f"{path}: {size} bytes, too large for a statistics file (at most {MAX_BYTES})")
            return json.loads(fh.read(MAX_BYTES + 1).decode("utf-8"))
    except FileNotFoundError:
        raise GgufMtpError(f"{path}: no such file; write one with gguf-mtp run --stats-json FILE") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise FormatError(f"{path}: not valid JSON ({str(e)[:80]}); pass a file gguf-mtp run --stats-json wrote"
                          ) from None
    except GgufMtpError:
        raise
    except OSError as e:
        from .files import describe_os_error

        raise GgufMtpError(describe_os_error(e, path)) from None


def _number(v: object, where: str, *, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise FormatError(f"{where} is {str(v)[:40]!r}, expected a number from {lo:g} to {hi:g}")
    return float(v)


def _k(v: object, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_POSITIONS:
        raise FormatError(f"{where} is {str(v)[:40]!r}, expected a draft length from 0 to {MAX_POSITIONS}")
    return v


def _acceptance(v: object, where: str) -> list[float]:
    if v is None:
        return []
    if not isinstance(v, list) or len(v) > MAX_POSITIONS:
        raise FormatError(f"{where} must be a list of at most {MAX_POSITIONS} fractions")
    return [_number(x, f"{where}[{i}]", hi=1.0) for i, x in enumerate(v)]


def _run_stats(path: Path, d: dict[str, Any]) -> Series:
    where = f"{path}: key"
    k = _k(d.get("n_draft_max", len(d.get("acceptance_at") or [])), f"{where} \"n_draft_max\"")
    tps = d.get("decode_tps")
    s = Series(path.stem, run=True, points=[Point(k, None if tps is None else _number(tps, f"{where} \"decode_tps\""),
                                 _acceptance(d.get("acceptance_at"), f"{where} \"acceptance_at\""))])
    lengths = d.get("draft_lengths") or {}
    if not isinstance(lengths, dict) or len(lengths) > MAX_POSITIONS + 1:
        raise FormatError(f"{where} \"draft_lengths\" must map draft lengths to step counts")
    for kk, n in lengths.items():
        if not (isinstance(kk, str) and len(kk) <= 2 and kk.isdigit()):
            raise FormatError(f"{where} \"draft_lengths\" has the key {kk[:20]!r}, expected a draft length")
        s.steps_by_k[_k(int(kk), f"{where} \"draft_lengths\"")] = int(_number(n, f"{where} \"draft_lengths\"[{kk}]"))
    n = sum(s.steps_by_k.values())
    s.adaptive = n > 0 and max(s.steps_by_k.values()) < 0.9 * n  # a fixed length drafts less only near the end
    return s


def _bench_rows(path: Path, rows: object, label: str, series: dict[str, Series]) -> None:
    """Benchmark rows: ``k`` (or ``k=N`` in the row's name), ``t/s``, ``acceptance_at``; one series per model
    and tool."""
    if not isinstance(rows, list):
        raise FormatError(f"{path}: key \"rows\" must be a list")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise FormatError(f"{path}: rows[{i}] must be an object")
        name = str(r.get("mode", r.get("row", "")))[:80]
        k = r.get("k")
        if k is None:
            m = re.search(r"\bk=(\d{1,2})\b", name)
            k = int(m.group(1)) if m else (0 if "," not in name else None)
        if k is None or "," in name or "auto" in name:  # mixed or adaptive lengths: no single k to draw it at
            continue
        k = _k(k, f"{path}: rows[{i}] key \"k\"")
        who = str(r.get("who") or re.sub(r"\s*k=\d+.*$", "", name) or "?")[:40]
        model = label or str(r.get("model") or "")[:40]  # oneshot.py names each row's model
        key = f"{model}: {who}" if model else who
        tps = r.get("t/s")
        series.setdefault(key, Series(key)).points.append(
            Point(k, None if tps is None else _number(tps, f"{path}: rows[{i}] key \"t/s\""),
                  _acceptance(r.get("acceptance_at"), f"{path}: rows[{i}] key \"acceptance_at\"")))


def load(paths: Sequence[str | os.PathLike[str]]) -> list[Series]:
    """The series in ``paths`` (run statistics and benchmark files, mixed as given)."""
    out: list[Series] = []
    for p in map(Path, paths):
        d = _read(p)
        if not isinstance(d, dict):
            raise FormatError(f"{p}: expected a JSON object (gguf-mtp run --stats-json, bench/oneshot.py or "
                              "bench/side_by_side.py output)")
        if "models" in d:
            models = d["models"]
            if not isinstance(models, list):
                raise FormatError(f"{p}: key \"models\" must be a list")
            found: dict[str, Series] = {}
            for j, m in enumerate(models):
                if not isinstance(m, dict):
                    raise FormatError(f"{p}: models[{j}] must be an object")
                _bench_rows(p, m.get("rows"), str(m.get("label", j))[:40], found)
            out += found.values()
        elif "rows" in d:
            found = {}
            _bench_rows(p, d["rows"], "", found)
            out += found.values()
        elif "acceptance_at" in d or "decode_tps" in d:
            out.append(_run_stats(p, d))
        else:
            raise FormatError(f"{p}: neither run statistics (no \"acceptance_at\") nor a benchmark (no \"rows\"); "
                              "pass a file gguf-mtp run --stats-json wrote")
    merged: dict[str, Series] = {}  # one run per draft length, as many files: one line
    runs = sum(s.run and not s.adaptive for s in out)
    for s in out:
        label = "gguf-mtp run" if s.run and not s.adaptive and runs > 1 else s.label
        m = merged.setdefault(label, Series(label, run=s.run, adaptive=s.adaptive))
        m.points += s.points
        for k, n in s.steps_by_k.items() if s.adaptive else ():
            m.steps_by_k[k] = m.steps_by_k.get(k, 0) + n
    if not any(p.tps is not None or p.acceptance_at for s in merged.values() for p in s.points):
        raise FormatError("nothing to draw: no decode speed and no acceptance in " + ", ".join(map(str, paths)))
    if len(merged) > MAX_SERIES:
        raise FormatError(f"{len(merged)} series: at most {MAX_SERIES} fit one chart; plot fewer files")
    return list(merged.values())


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise GgufMtpError(MISSING) from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def draw(series: list[Series], title: str = "") -> bytes:
    """The PNG's bytes: acceptance by position (each series at its longest draft) and speed by draft length."""
    plt = _pyplot()
    fig, (acc, speed) = plt.subplots(1, 2, figsize=(12, 5 + 0.18 * len(series)))
    with_acc = [(s, max((p for p in s.points if p.acceptance_at), key=lambda p: p.k)) for s in series
                if any(p.acceptance_at for p in s.points)]
    width = 0.8 / max(1, len(with_acc))
    for j, (s, p) in enumerate(with_acc):
        xs = [i + 1 + (j - (len(with_acc) - 1) / 2) * width for i in range(len(p.acceptance_at))]
        bars = acc.bar(xs, [100 * a for a in p.acceptance_at], width, label=f"{s.label} (k={p.k})")
        if len(with_acc) <= 3:
            acc.bar_label(bars, fmt="%.0f", fontsize=7)
    npos = max((len(p.acceptance_at) for _, p in with_acc), default=1)
    acc.set_xticks(range(1, npos + 1))
    acc.set(title="acceptance by draft position", xlabel="draft position", ylabel="% of drafts accepted",
            ylim=(0, 105))
    ks: set[int] = set()
    for s in series:
        if s.adaptive:  # its speed is that of all its lengths together: a level, not a point
            tps = next((p.tps for p in s.points if p.tps is not None), None)
            if tps is not None:
                speed.axhline(tps, ls="--", color="tab:green",
                              label=f"{s.label}: auto, mean draft length {s.mean_k:.1f}")
            continue
        pts = sorted((p.k, p.tps) for p in s.points if p.tps is not None)
        ks |= {k for k, _ in pts}
        if pts:
            speed.plot([k for k, _ in pts], [t for _, t in pts], "o-", label=s.label)
    speed.set(title="decode speed by draft length (0: no drafting)", xlabel="draft length", ylabel="tokens/s")
    speed.set_ylim(bottom=0)
    handles, labels = speed.get_legend_handles_labels()
    usage = [s for s in series if s.adaptive]
    if usage:  # auto draft length: how often it chose each length
        ax = speed.twinx()
        for s in usage:
            total = sum(s.steps_by_k.values()) or 1
            ks_used = sorted(s.steps_by_k)
            ks |= set(ks_used)
            ax.bar(ks_used, [100 * s.steps_by_k[k] / total for k in ks_used], 0.3, alpha=0.25, color="grey",
                   label=f"{s.label}: % of steps at each length")
        ax.set(ylabel="% of steps (bars)", ylim=(0, 105))
        more = ax.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    speed.set_xticks(sorted(ks) or [0])
    ncol = 1 if max(map(len, labels), default=0) > 40 else 2
    if handles:  # legends under the charts: never over a bar or a line
        speed.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=ncol,
                     frameon=False)
    if acc.get_legend_handles_labels()[0]:
        acc.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=ncol, frameon=False)
    for ax in (acc, speed):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def plot(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str] | None = None, *,
         force: bool = False) -> Path:
    """Draw ``paths`` into ``out`` (default: the first file's name with ``.png``), atomically."""
    if not paths:
        raise GgufMtpError("name at least one statistics file")
    dst = Path(out) if out is not None else Path(paths[0]).with_suffix(".png")
    check_output(dst, force=force, inputs=list(map(Path, paths)))  # before the work
    series = load(paths)  # a bad file is named whether matplotlib is there or not
    title = ", ".join(Path(p).name for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    data = draw(series, title)
    return write_bytes(dst, data, force=force, inputs=list(map(Path, paths)))
