"""bench/vocab_coverage.py: held-out coverage of a draft vocabulary (issue 25), on the shipped tiny model's vocabulary
(4096 tokens) and a small text: this repository's own sources and documents, tokenized by the real llama.cpp."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from bench import vocab_coverage as vc
from gguf_mtp import draft_vocab as dv
from gguf_mtp.convert import convert
from gguf_mtp.ggufio.model import GGUFModel

pytestmark = pytest.mark.llama  # bench.vocab_coverage loads llama.cpp when it counts tokens, not on import

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny-qwen35-mtp"
N_VOCAB = 4096
NS = (256, 512, 1024, 2048, N_VOCAB)
MAX_BYTES = 96 << 10  # per part: a few dozen files, tokenized in well under a second


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> GGUFModel:
    d = tmp_path_factory.mktemp("cov")
    return GGUFModel(convert(TINY, outfile=d / "head.gguf", layout="head-only", progress=False).path)


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python sources and Markdown documents, one file copied twice (a duplicate must not straddle the split)."""
    d = tmp_path_factory.mktemp("texts")
    for sub in ("gguf_mtp", "docs"):
        shutil.copytree(ROOT / sub, d / sub, ignore=shutil.ignore_patterns("__pycache__", "*.png", "*.svg"))
    (d / "copy").mkdir()
    shutil.copy(ROOT / "gguf_mtp" / "draft_vocab.py", d / "copy" / "draft_vocab.py")
    return d


@pytest.fixture(scope="module")
def parts(texts: Path) -> tuple[list[vc.Doc], list[vc.Doc]]:
    return vc.split(vc.collect([texts]), MAX_BYTES)


@pytest.fixture(scope="module")
def result(vocab: GGUFModel, parts: tuple[list[vc.Doc], list[vc.Doc]]) -> dict[str, object]:
    return vc.measure(vocab.model_kvs(), *parts, NS, vocab.path)


def rows(result: dict[str, object], choice: str) -> list[dict[str, float]]:
    out = [r for r in result["rows"] if r["choice"] == choice]  # type: ignore[attr-defined]
    assert [r["n"] for r in out] == list(NS)
    return out


def test_the_split_puts_each_text_in_one_part(texts: Path, parts: tuple[list[vc.Doc], list[vc.Doc]]) -> None:
    counting, held = parts
    assert len(counting) >= 5 and len(held) >= 5
    assert not {d.digest for d in counting} & {d.digest for d in held}
    assert not {d.path for d in counting} & {d.path for d in held}
    assert not {d.data for d in counting} & {d.data for d in held}
    assert all(sum(len(d.data) for d in p) <= MAX_BYTES for p in parts)
    # a file's part is its content's: the same with other directories beside it, and for each copy of it
    alone = vc.split(vc.collect([texts / "docs"]), MAX_BYTES)
    for k in (0, 1):
        assert alone[k] and not {d.digest for d in alone[k]} & {d.digest for d in parts[1 - k]}
    assert sum(d.data == (ROOT / "gguf_mtp" / "draft_vocab.py").read_bytes() for d in vc.collect([texts])) == 1
    # a smaller counting part takes files of the same half; the held-out part stays as it was
    small = vc.split(vc.collect([texts]), MAX_BYTES, count_bytes=MAX_BYTES // 4)
    assert small[1] == held and 0 < sum(len(d.data) for d in small[0]) <= MAX_BYTES // 4
    assert not {d.digest for d in small[0]} & {d.digest for d in held}


def test_files_are_read_bounded_and_as_utf8(tmp_path: Path) -> None:
    """A file is cut at a line end, or inside no UTF-8 sequence when it has none; a .gz is read inflated and
    bounded; binary and empty files, other endings, FIFOs and symlinks are left out."""
    (tmp_path / "long.txt").write_text("é" * 100)  # one line, two bytes a character
    (tmp_path / "lines.md").write_text("first line\nsecond line\n")
    (tmp_path / "big.txt.gz").write_bytes(gzip.compress(b"x" * 1000 + b"\n" + b"y" * (10 << 20)))
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00 not UTF-8")
    (tmp_path / "empty.txt").write_bytes(b"\n\n")
    (tmp_path / "fake.gz").write_bytes(b"not gzip at all")
    (tmp_path / "other.bin").write_text("text under another ending")
    (tmp_path / "link.txt").symlink_to(tmp_path / "lines.md")
    os.mkfifo(tmp_path / "fifo.txt")
    got = {d.path.name: d.data for d in vc.collect([tmp_path], max_file_bytes=15)}
    assert got == {"long.txt": "é".encode() * 7, "lines.md": b"first line\n", "big.txt.gz": b"x" * 15}
    got = {d.path.name: d.data for d in vc.collect([tmp_path], max_file_bytes=2000)}
    assert got["big.txt.gz"] == b"x" * 1000 + b"\n" and got["lines.md"] == b"first line\nsecond line\n"


def test_held_out_directories_are_held_out_whole(vocab: GGUFModel, texts: Path) -> None:
    """--held-dir: every file under it (and no copy of one) is held out, nothing else; coverage per directory."""
    docs = vc.collect([texts / "docs", texts])  # the held-out directory is also under a counting one
    counting, held = vc.split_dirs(docs, [texts / "docs"], MAX_BYTES)
    assert held and counting
    assert all(d.path.is_relative_to(texts / "docs") for d in held)
    assert not any(d.path.is_relative_to(texts / "docs") for d in counting)
    assert not {d.digest for d in counting} & {d.digest for d in held}
    r = vc.measure(vocab.model_kvs(), counting, held, (512, N_VOCAB), vocab.path, {"docs": texts / "docs"})
    assert r["held_out_groups"]["docs"]["tokens"] == r["held_out"]["tokens"]
    for row in r["rows"]:
        assert row["held_out_by_group"]["docs"] == pytest.approx(row["held_out"], abs=1e-12)


def test_coverage_is_coherent(result: dict[str, object]) -> None:
    assert result["n_vocab"] == N_VOCAB
    held, counting = result["held_out"], result["counting"]
    assert held["tokens"] > 10_000 and counting["tokens"] > 10_000  # type: ignore[index]
    assert held["tokens"] == result["held_out_code"]["tokens"] + result["held_out_prose"]["tokens"]  # type: ignore[index]
    for choice in ("lowest ids", "counted", "counted on held-out (bound)"):
        rs = rows(result, choice)
        for key in ("held_out", "held_out_code", "held_out_prose", "counting_part"):
            cov = [r[key] for r in rs]
            assert all(0.0 <= c <= 1.0 for c in cov), (choice, key, cov)
            assert cov == sorted(cov), (choice, key, cov)  # more tokens never cover less
            assert cov[-1] == 1.0, (choice, key)  # the whole vocabulary covers everything
    counted, bound, lowest = rows(result, "counted"), rows(result, "counted on held-out (bound)"), \
        rows(result, "lowest ids")
    for c, b, lo in zip(counted, bound, lowest):
        # the N most frequent held-out tokens cover the held-out part best; counted on a part, that part best
        assert b["held_out"] >= max(c["held_out"], lo["held_out"]), (c, b, lo)
        assert c["counting_part"] >= max(b["counting_part"], lo["counting_part"]), (c, b, lo)
    # counted on a part, that part is well covered by a quarter of the vocabulary (Python text, a Python vocabulary)
    assert counted[2]["counting_part"] >= 0.8, counted[2]


def test_held_out_is_not_the_counting_part(result: dict[str, object]) -> None:
    """Were the held-out files counted too, the counted choice would be the held-out bound at every N."""
    counted, bound = rows(result, "counted"), rows(result, "counted on held-out (bound)")
    assert any(c["held_out"] < b["held_out"] - 1e-3 for c, b in zip(counted[:-1], bound[:-1])), (counted, bound)
    assert any(c["counting_part"] > c["held_out"] + 1e-3 for c in counted[:-1]), counted


def test_the_default_choice_is_the_writers(vocab: GGUFModel, result: dict[str, object]) -> None:
    """The 'lowest ids' rows measure what `--draft-vocab N` writes; coverage is computed on the ids it picks."""
    get = vocab.get
    ids = dv.choose(vocab.model_kvs(), 512, None, vocab.path)
    assert ids.size == 512 and dv.required_ids(get, vocab.path) <= set(ids.tolist())
    lowest = rows(result, "lowest ids")[1]
    assert 0.0 < lowest["held_out"] < 1.0


def test_the_command_writes_its_report(vocab: GGUFModel, texts: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    vc.main([str(vocab.path), "--text-dir", str(texts), "-n", "512", str(N_VOCAB), "--max-bytes", str(MAX_BYTES),
             "--out", str(out)])
    txt = (tmp_path / "r.txt").read_text()
    assert "counted on held-out (bound)" in txt and "100.00%" in txt
    assert '"held_out"' in (tmp_path / "r.json").read_text()
    assert "lowest ids" in capsys.readouterr().out
    vc.main([str(vocab.path), "--text-dir", str(texts / "gguf_mtp"), "--held-dir", str(texts / "docs"),
             "--held-dir", str(texts / "copy"), "-n", "512", "--out", str(out)])
    assert "held-out coverage by directory" in capsys.readouterr().out
    assert {"docs", "copy"} == set(json.loads((tmp_path / "r.json").read_text())["held_out_groups"])


@pytest.mark.parametrize("args, says", [
    (["--text-dir", "/nonexistent-dir"], "not a directory"),
    (["--text-dir", ".", "--max-bytes", "0"], "--max-bytes"),
    (["--text-dir", ".", "--held-dir", "/nonexistent-dir"], "--held-dir /nonexistent-dir: not a directory"),
    (["--text-dir", ".", "--rank-share", "0.5", "1.5"], "--rank-share 0.5 1.5: each share must be 0 to 1"),
])
def test_bad_arguments_get_one_line(vocab: GGUFModel, args: list[str], says: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        vc.main([str(vocab.path), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and says in err and err.count("\n") == 1, err


@pytest.mark.parametrize("content, says", [(b"not a gguf\n", "too small"), (b"{" + b" " * 64 + b"}", "not a GGUF"),
                                           (None, "no such file")])
def test_a_bad_vocabulary_file_gets_one_line(tmp_path: Path, content: bytes | None, says: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SystemExit) as e:
        vc.main([str(path), "--text-dir", str(ROOT / "docs")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and says in err and err.count("\n") == 1, err


def test_too_little_text_gets_one_line(vocab: GGUFModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "one.md").write_text("a single file cannot be split in two\n")
    with pytest.raises(SystemExit) as e:
        vc.main([str(vocab.path), "--text-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "too little text" in err and err.count("\n") == 1, err


def test_rank_share_rows_are_what_the_writers_count(vocab: GGUFModel, parts: tuple[list[vc.Doc], list[vc.Doc]],
                                                     tmp_path: Path) -> None:
    """``--rank-share``: counted choices with part of their room by merge rank. The N most frequent counted tokens
    cover the counting part best, so a share never covers it more; the row at dv.RANK_SHARE measures the choice
    `--draft-vocab N --draft-vocab-from TEXT` writes (the counting part written out as that text)."""
    counting, held = parts
    r = vc.measure(vocab.model_kvs(), counting, held, (512,), vocab.path, rank_shares=(dv.RANK_SHARE, 0.5))
    by = {row["choice"]: row for row in r["rows"]}
    share = by[f"counted, {dv.RANK_SHARE:.0%} by rank"]
    for row in (share, by["counted, 50% by rank"]):
        assert row["counting_part"] <= by["counted"]["counting_part"]
    assert share["counting_part"] > by["lowest ids"]["counting_part"]
    text = tmp_path / "counting.txt"
    text.write_bytes(b"".join(d.data if d.data.endswith(b"\n") else d.data + b"\n" for d in counting))
    written = dv.choose(vocab.model_kvs(), 512, text, vocab.path)
    c_held = vc.count(vocab.model_kvs(), held, r["n_vocab"], tmp_path)
    c_count = vc.count(vocab.model_kvs(), counting, r["n_vocab"], tmp_path)
    assert vc.coverage(written, c_held) == pytest.approx(share["held_out"], abs=1e-12)
    assert vc.coverage(written, c_count) == pytest.approx(share["counting_part"], abs=1e-12)
    assert not np.array_equal(written, dv.by_counts(512, c_count, dv.required_ids(vocab.get, vocab.path)))
