"""Coverage of a draft vocabulary on held-out text: the share of a text's tokens that fall inside the N tokens
``--draft-vocab N`` keeps (issue 25: "≥ 97% at 32k on realistic text").

    python -m bench.vocab_coverage VOCAB.gguf --text-dir /usr/lib/python3.11 --text-dir /usr/share/doc \\
        --out bench/reference/vocab-coverage/NAME

Text: the files under each ``--text-dir`` whose names end in one of ``--ext`` (``.gz`` ones decompressed), each
read up to ``--max-file-bytes`` (cut at a line end), kept only if UTF-8, identical contents once. Split by file:
the parity of the first byte of a file's content hash puts it in the counting part or the held-out part, so a
file (and every copy of it) is in one part only, whatever other files the directories hold; each part then takes
files in hash order up to ``--max-bytes`` (``--count-bytes`` for the counting part: how much text a user's
``--draft-vocab-from`` needs). With ``--held-dir`` the held-out part is the text under those directories
instead (another kind of text than the counting part's, e.g. other languages), each reported apart. Both parts
are tokenized by llama.cpp with VOCAB's own vocabulary, through the code ``--draft-vocab-from`` uses
(gguf_mtp.draft_vocab.count_tokens).

For each N it reports the held-out coverage of: the default choice (the N lowest ids, by merge rank:
``draft_vocab.choose`` without a text), the N most frequent on the counting part (``draft_vocab.by_counts``, what
``--draft-vocab-from`` gives), and, as an upper bound, the N most frequent on the held-out part itself; each
with the required tokens (control, end-of-generation) included, as the writers choose them. Held-out coverage
is also given for source code and prose apart.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shlex
import sys
import tempfile
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import gguf_mtp.runtime  # noqa: F401  (llama.cpp's libraries before numpy's: count_tokens loads the vocabulary)

# isort: split
import numpy as np

from bench.common import machine, save, table
from gguf_mtp import draft_vocab as dv
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.ggufio.format import KV
from gguf_mtp.ggufio.model import GGUFModel

NS = (8192, 16384, 32768, 65536)
EXTS = (".py", ".txt", ".md", ".rst", ".gz")
CODE = (".py", ".pyi", ".c", ".h", ".sh", ".pl", ".js")  # held-out files reported as code; the rest as prose
MAX_BYTES = 32 << 20  # per part
MAX_FILE_BYTES = 1 << 20


class Doc(NamedTuple):
    """One file's text: its path, kind (code or prose), content and content hash."""

    path: Path
    kind: str
    data: bytes
    digest: str


def _name(path: Path) -> str:
    return path.name[:-3] if path.name.endswith(".gz") else path.name


def _read(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of the file (decompressed for ``.gz``), cut at the last line end; None when
    unreadable or not UTF-8."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:  # read bounded: a small .gz may inflate to anything
                data = f.read(limit + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
        return None
    if len(data) > limit:
        data = data[:limit]
        nl = data.rfind(b"\n")
        data = data[:nl + 1] if nl > 0 else data
        while data and (data[-1] & 0xC0) == 0x80:  # never inside a UTF-8 sequence: its continuation bytes,
            data = data[:-1]
        if data and data[-1] >= 0xC0:  # then the byte that starts it
            data = data[:-1]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data if data.strip() else None


def collect(dirs: Sequence[Path], exts: Sequence[str] = EXTS, max_file_bytes: int = MAX_FILE_BYTES) -> list[Doc]:
    """The UTF-8 text files under ``dirs`` with one of ``exts``, one per distinct content, in hash order."""
    seen: dict[str, Doc] = {}
    for root in dirs:
        for here, subdirs, files in os.walk(root):  # symlinks to directories are not followed: no loops
            subdirs.sort()
            for name in sorted(files):
                p = Path(here) / name
                if not name.endswith(tuple(exts)) or p.is_symlink() or not p.is_file():
                    continue
                data = _read(p, max_file_bytes)
                if data is None:
                    continue
                digest = hashlib.sha256(data).hexdigest()
                kind = "code" if _name(p).endswith(CODE) else "prose"
                seen.setdefault(digest, Doc(p, kind, data, digest))
    return [seen[d] for d in sorted(seen)]


def split(docs: Iterable[Doc], max_bytes: int = MAX_BYTES,
          count_bytes: int | None = None) -> tuple[list[Doc], list[Doc]]:
    """(counting part, held-out part): by the parity of each content hash's first byte, each part filled in hash
    order up to ``max_bytes`` (the counting part up to ``count_bytes`` if given). A file's part depends on its
    content only."""
    docs = list(docs)
    half = [[d for d in docs if int(d.digest[:2], 16) & 1 == k] for k in (0, 1)]
    return take(half[0], max_bytes if count_bytes is None else count_bytes), take(half[1], max_bytes)


def take(docs: Iterable[Doc], max_bytes: int) -> list[Doc]:
    """``docs`` in hash order up to ``max_bytes`` (a file that does not fit is left out, smaller ones still go in)."""
    out, used = [], 0
    for d in sorted(docs, key=lambda d: d.digest):
        if used + len(d.data) + 1 <= max_bytes:
            out.append(d)
            used += len(d.data) + 1
    return out


def split_dirs(docs: Iterable[Doc], held_dirs: Sequence[Path], max_bytes: int = MAX_BYTES,
               count_bytes: int | None = None) -> tuple[list[Doc], list[Doc]]:
    """(counting part, held-out part) when the held-out text is its own: the files under ``held_dirs`` are held
    out, the others (and no copy of a held-out file) counted; each part up to its size in hash order."""
    docs = list(docs)
    held = [d for d in docs if any(d.path.is_relative_to(h) for h in held_dirs)]
    digests = {d.digest for d in held}
    counting = [d for d in docs if d.digest not in digests]
    return take(counting, max_bytes if count_bytes is None else count_bytes), take(held, max_bytes)


def count(kvs: Sequence[KV], docs: Sequence[Doc], n_vocab: int, tmp: Path) -> np.ndarray:
    """Token counts of ``docs`` (one text, files separated by a line end) as llama.cpp tokenizes them with the
    vocabulary in ``kvs``."""
    if not docs:
        return np.zeros(n_vocab, dtype=np.int64)
    text = tmp / "part.txt"
    with open(text, "wb") as f:
        for d in docs:
            f.write(d.data if d.data.endswith(b"\n") else d.data + b"\n")
    try:
        return dv.count_tokens(kvs, text, n_vocab)
    finally:
        text.unlink()


def coverage(ids: np.ndarray, counts: np.ndarray) -> float | None:
    """The share of the tokens counted in ``counts`` whose id is in ``ids`` (None without tokens)."""
    total = int(counts.sum())
    return float(counts[ids].sum()) / total if total else None


def measure(kvs: Sequence[KV], counting: Sequence[Doc], held: Sequence[Doc], ns: Sequence[int],
            where: object = "vocabulary", groups: Mapping[str, Path] | None = None,
            rank_shares: Sequence[float] = ()) -> dict[str, Any]:
    """Coverage of each choice of N tokens on the held-out part (all, code, prose and, with ``groups``, the files
    under each named directory apart) and on the counting part; ``rank_shares``: also counted choices with that
    share of their room by merge rank (``draft_vocab.by_counts(rank_share=)``)."""
    table_ = {kv.key: kv for kv in kvs}

    def get(key: str) -> Any:
        kv = table_.get(key)
        return None if kv is None else kv.scalar()

    tokens = get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise GgufMtpError(f"{where}: no tokenizer.ggml.tokens; give a GGUF with the model's vocabulary")
    n_vocab = len(tokens)
    required = dv.required_ids(get, where)
    unused = dv.unused_ids(get)
    groups = dict(groups or {})

    def group(d: Doc) -> str:
        return next((g for g, root in groups.items() if d.path.is_relative_to(root)), "")

    cells: dict[tuple[str, str], list[Doc]] = {}
    for x in held:
        cells.setdefault((group(x), x.kind), []).append(x)
    with tempfile.TemporaryDirectory(prefix="vocab-coverage-") as d:
        c_count = count(kvs, counting, n_vocab, Path(d))
        c_cell = {key: count(kvs, docs, n_vocab, Path(d)) for key, docs in sorted(cells.items())}
    zero = np.zeros(n_vocab, dtype=np.int64)
    c_kind = {k: sum((c for (_, kind), c in c_cell.items() if kind == k), zero) for k in ("code", "prose")}
    c_group = {g: sum((c for (gg, _), c in c_cell.items() if gg == g), zero) for g in groups}
    c_all = c_kind["code"] + c_kind["prose"]
    rows = []
    for n in ns:
        if n > n_vocab or n < len(required):
            continue
        choices: dict[str, np.ndarray | None] = {
            "lowest ids": None, "counted": dv.by_counts(n, c_count, required),
            "counted on held-out (bound)": dv.by_counts(n, c_all, required)}
        try:
            choices["lowest ids"] = dv.choose(kvs, n, None, where)
            for share in rank_shares:  # counted, with that share of the room by merge rank
                choices[f"counted, {share:.0%} by rank"] = dv.by_counts(n, c_count, required, rank_share=share,
                                                                         skip=unused)
        except GgufMtpError:  # a tokenizer whose ids do not follow merge order: no default choice
            del choices["lowest ids"]
        for name, ids in choices.items():
            assert ids is not None and ids.size == n
            row: dict[str, Any] = {"n": n, "choice": name, "held_out": coverage(ids, c_all),
                                   "held_out_code": coverage(ids, c_kind["code"]),
                                   "held_out_prose": coverage(ids, c_kind["prose"]),
                                   "counting_part": coverage(ids, c_count)}
            if groups:
                row["held_out_by_group"] = {g: coverage(ids, c) for g, c in c_group.items()}
            rows.append(row)

    def part(docs: Sequence[Doc], counts: np.ndarray) -> dict[str, int]:
        return {"files": len(docs), "bytes": sum(len(x.data) for x in docs), "tokens": int(counts.sum()),
                "distinct_tokens": int(np.count_nonzero(counts))}

    out = {"n_vocab": n_vocab, "required": len(required), "rows": rows,
           "counting": part(counting, c_count), "held_out": part(held, c_all),
           "held_out_code": part([x for x in held if x.kind == "code"], c_kind["code"]),
           "held_out_prose": part([x for x in held if x.kind == "prose"], c_kind["prose"])}
    if groups:
        out["held_out_groups"] = {g: part([x for x in held if group(x) == g], c) for g, c in c_group.items()}
    return out


def by_dir(docs: Sequence[Doc], root: Path) -> dict[str, int]:
    """Files and bytes of ``docs`` that come from under ``root``."""
    mine = [d for d in docs if d.path.is_relative_to(root)]
    return {"files": len(mine), "bytes": sum(len(d.data) for d in mine)}


def percent(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def report(r: dict[str, Any]) -> str:
    pct = {k: percent for k in ("held_out", "held_out_code", "held_out_prose", "counting_part")}
    rows = [{"N": x["n"], "choice": x["choice"], **{k: f(x[k]) for k, f in pct.items()}} for x in r["rows"]]
    parts = "\n".join(f"{k}: {v['files']} files, {v['bytes']} bytes, {v['tokens']} tokens "
                      f"({v['distinct_tokens']} distinct)" for k, v in r.items()
                      if k in ("counting", "held_out", "held_out_code", "held_out_prose"))
    parts += "".join(f"\n  from {d}: counting {v['counting']['files']} files ({v['counting']['bytes']} bytes), "
                     f"held-out {v['held_out']['files']} files ({v['held_out']['bytes']} bytes)"
                     for d, v in r.get("by_dir", {}).items())
    text = (f"vocabulary: {r['n_vocab']} tokens ({r['required']} required)\n{parts}\n\n"
            + table(rows, ["N", "choice", "held_out", "held_out_code", "held_out_prose", "counting_part"]))
    groups = r.get("held_out_groups") or {}
    if groups:
        choices = list(dict.fromkeys(x["choice"] for x in r["rows"]))
        ns = list(dict.fromkeys(str(x["n"]) for x in r["rows"]))
        by = [{"held-out dir": g, "tokens": v["tokens"], "choice": c,
               **{str(x["n"]): percent(x["held_out_by_group"][g]) for x in r["rows"] if x["choice"] == c}}
              for g, v in groups.items() for c in choices]
        text += "\n\nheld-out coverage by directory:\n" + table(by, ["held-out dir", "tokens", "choice", *ns])
    return text


def fail(message: str) -> NoReturn:
    """One line on stderr and exit status 2, as the CLI does for bad input."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.vocab_coverage", description=__doc__.split("\n\n")[0])
    ap.add_argument("vocab", type=Path, help="a GGUF with the model's vocabulary (a model or a vocab-only file)")
    ap.add_argument("--text-dir", type=Path, action="append", required=True, help="a directory of text (repeat)")
    ap.add_argument("--held-dir", type=Path, action="append", default=[],
                    help="hold out the files under this directory (repeat; default: half of the --text-dir files)")
    ap.add_argument("--ext", nargs="+", default=list(EXTS), help=f"file name endings to read (default: {EXTS})")
    ap.add_argument("-n", "--n", type=int, nargs="+", default=list(NS), help=f"sizes N (default: {NS})")
    ap.add_argument("--max-bytes", type=int, default=MAX_BYTES, help="bytes of text per part")
    ap.add_argument("--count-bytes", type=int, help="bytes of the counting part (default: --max-bytes)")
    ap.add_argument("--max-file-bytes", type=int, default=MAX_FILE_BYTES, help="bytes read of one file")
    ap.add_argument("--rank-share", type=float, nargs="+", default=[], metavar="F",
                    help="also counted choices with this share of their room by merge rank (0 to 1)")
    ap.add_argument("--source", default="", help="where the vocabulary comes from (recorded)")
    ap.add_argument("--out", type=Path, help="write OUT.txt and OUT.json")
    args = sys.argv[1:] if argv is None else argv
    a = ap.parse_args(args)
    count_bytes = a.max_bytes if a.count_bytes is None else a.count_bytes
    if not (0 < a.max_bytes <= dv.MAX_TEXT_BYTES and 0 < count_bytes <= dv.MAX_TEXT_BYTES) or a.max_file_bytes <= 0:
        fail(f"--max-bytes and --count-bytes must be 1 to {dv.MAX_TEXT_BYTES}, --max-file-bytes positive")
    if any(not 0.0 <= f <= 1.0 for f in a.rank_share):
        fail(f"--rank-share {' '.join(map(str, a.rank_share))}: each share must be 0 to 1")
    for opt, dirs in (("--text-dir", a.text_dir), ("--held-dir", a.held_dir)):
        for d in dirs:
            if not d.is_dir():
                fail(f"{opt} {d}: not a directory")
    t0 = time.perf_counter()
    try:
        m = GGUFModel(a.vocab)
        groups = {}
        if a.held_dir:
            docs = collect(a.held_dir + a.text_dir, a.ext, a.max_file_bytes)
            counting, held = split_dirs(docs, a.held_dir, a.max_bytes, count_bytes)
            names = [d.name or str(d) for d in a.held_dir]
            groups = {(n if names.count(n) == 1 else str(d)): d for n, d in zip(names, a.held_dir)}
        else:
            counting, held = split(collect(a.text_dir, a.ext, a.max_file_bytes), a.max_bytes, count_bytes)
        if not counting or not held:
            fail("too little text to split into two parts; give more --text-dir")
        r = measure(m.model_kvs(), counting, held, a.n, m.path, groups, a.rank_share)
        r["by_dir"] = {str(d): {name: by_dir(part, d) for name, part in (("counting", counting), ("held_out", held))}
                       for d in a.text_dir + a.held_dir}
    except GgufMtpError as e:
        fail(str(e))
    r.update(vocab=str(a.vocab), vocab_sha256=hashlib.sha256(a.vocab.read_bytes()).hexdigest(), source=a.source,
             text_dirs=[str(d) for d in a.text_dir], held_dirs=[str(d) for d in a.held_dir], ext=a.ext,
             max_bytes=a.max_bytes, count_bytes=count_bytes, max_file_bytes=a.max_file_bytes,
             command=shlex.join(["python", "-m", "bench.vocab_coverage", *args]),
             machine=machine(), seconds=round(time.perf_counter() - t0, 1))
    text = report(r)
    print(text)
    if a.out:
        save(a.out.with_suffix(".json"), r)
        a.out.with_suffix(".txt").write_text(f"$ {r['command']}\nvocabulary: {a.vocab} (sha256 {r['vocab_sha256']})"
                                             f"{'; ' + a.source if a.source else ''}\n{text}\n")


if __name__ == "__main__":
    from bench.common import exit_after

    exit_after(main)
