"""A hostile Hub (tests/hub_server.py with its knobs on): names that leave the cache, bad commit ids, wrong,
short, long, cut and poisoned bytes, ignored ranges, lying sizes and ETags, 5xx, an unreachable endpoint.

Property of every refused case, through the CLI: exit status 2 and one line starting ``error:``, no
traceback, no process killed by a signal, and nothing outside the caches changes (the tmp tree, the repo's
files and a victim file at every traversal target are compared byte for byte). What is cached is only ever
reused when it still checks out; ``--force-download`` drops it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from gguf_mtp import convert
from tests.synthetic import SyntheticSpec, write_checkpoint
from gguf_mtp_cli.main import main

from .hub_server import HubStandIn
from .test_hub import same_tensors

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

REPO = "org/tiny"
INDEX = "model.safetensors.index.json"
HEAD_SHARD = "model-00003-of-00003.safetensors"  # holds the MTP block
HEAD_TENSOR = "mtp.fc.weight"
VICTIM = "victim.safetensors"
UP = "../../../../"  # from <cache>/partial/org--tiny/<commit>/ (and hf-cache/models--org--tiny/snapshots/<c>/)
CACHES = ("gm-cache", "hf-cache")


@dataclass
class Env:
    tmp: Path
    repo: Path  # what the Hub serves (its files must keep their bytes)
    hub: HubStandIn
    out: Path

    def run(self, *args: str) -> tuple[int, str]:
        import io
        from contextlib import redirect_stderr

        err = io.StringIO()
        with redirect_stderr(err):
            rc = main(list(args))
        return rc, err.getvalue()


def tree(root: Path, skip: tuple[str, ...] = CACHES) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        if rel.parts and rel.parts[0] in skip:
            continue
        for f in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            p = Path(dirpath) / f
            out[(rel / f).as_posix()] = "-> " + os.readlink(p) if p.is_symlink() else \
                hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def largest_cached(env: Env) -> int:
    return max((p.stat().st_size for c in CACHES for p in (env.tmp / c).rglob("*") if p.is_file()), default=0)


@pytest.fixture()
def env(tmp_path: Path, monkeypatch):
    repo = write_checkpoint(tmp_path / "repo", SyntheticSpec("qwen35", vocab_size=512, n_shards=3))
    (tmp_path / VICTIM).write_bytes(b"precious: must keep these bytes")
    (tmp_path / "work").mkdir()
    with HubStandIn() as h:
        h.add(REPO, repo)
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.setenv("GGUF_MTP_CACHE", str(tmp_path / "gm-cache"))
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        import huggingface_hub.constants as c

        monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        import huggingface_hub.utils._http as http

        # huggingface_hub retries 5xx with exponential backoff (about 23 s): keep the retries, skip the waits
        fast = {k: getattr(time, k) for k in dir(time) if not k.startswith("_")}
        fast["sleep"] = lambda s: None
        monkeypatch.setattr(http, "time", SimpleNamespace(**fast))
        monkeypatch.chdir(tmp_path / "work")
        yield Env(tmp_path, repo, h, tmp_path / "work" / "out.gguf")


def set_index(env: Env, shard: str) -> None:
    idx = json.loads((env.repo / INDEX).read_text())
    idx["weight_map"][HEAD_TENSOR] = shard
    (env.repo / INDEX).write_text(json.dumps(idx))


def header_len(env: Env, shard: str = HEAD_SHARD) -> int:
    return 8 + int.from_bytes((env.repo / shard).read_bytes()[:8], "little")


def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


HEAD = ("extract", REPO, "--head-only", "-o", "{out}", "-q")
FULL = ("convert", REPO, "-o", "{out}", "-q", "--outtype", "q8_0")
Setup = Callable[[Env, pytest.MonkeyPatch], None]


def knob(**kw: object) -> Setup:
    def setup(env: Env, mp: pytest.MonkeyPatch) -> None:
        for k, v in kw.items():
            cur = getattr(env.hub, k)
            if isinstance(cur, set):
                cur.update(v)  # type: ignore[arg-type]
            elif isinstance(cur, dict):
                cur.update(v)  # type: ignore[arg-type]
            else:
                setattr(env.hub, k, v)
    return setup


def index(name: Callable[[Env], str]) -> Setup:
    return lambda env, mp: set_index(env, name(env))


def flipped(env: Env, name: str) -> bytes:
    return bytes(b ^ 0x20 for b in (env.repo / name).read_bytes())


CASES: list[tuple[str, Setup, tuple[tuple[str, ...], ...], tuple[str, ...]]] = [
    ("index-dotdot", index(lambda e: UP + VICTIM), (HEAD, FULL), (INDEX, f"weight_map['{HEAD_TENSOR}']", "'..'")),
    ("index-absolute", index(lambda e: str(e.tmp / VICTIM)), (HEAD, FULL), (INDEX, "absolute path")),
    ("index-backslash", index(lambda e: UP.replace("/", "\\") + VICTIM), (HEAD, FULL), (INDEX, "backslash")),
    ("index-nul", index(lambda e: "x\x00.safetensors"), (HEAD, FULL), (INDEX, "control character")),
    ("index-not-in-repo", index(lambda e: "model-00009-of-00009.safetensors"), (HEAD,), (INDEX, "does not have")),
    ("sibling-dotdot", knob(extra_files={UP + VICTIM: b"x" * 64}), (HEAD, FULL), ("file list", "'..'")),
    ("sibling-absolute", lambda e, mp: e.hub.extra_files.update({str(e.tmp / VICTIM): b"x"}), (HEAD, FULL),
     ("file list", "absolute path")),
    ("commit-traversal", knob(commit=UP + "x"), (HEAD, FULL), ("commit id",)),
    ("commit-not-hex", knob(commit="Z" * 40), (HEAD,), ("commit id",)),
    ("commit-empty", knob(commit=""), (HEAD,), ("commit id",)),
    ("info-5xx", knob(fail_info=True), (HEAD, FULL), ("answered 500",)),
    ("info-malformed", knob(info_json={"id": REPO, "sha": "a" * 40, "siblings": [{"size": 1}]}), (HEAD, FULL),
     ("malformed",)),
    ("small-5xx", knob(fail={"config.json"}), (HEAD, FULL), ("500",)),
    ("small-wrong-bytes", lambda e, mp: e.hub.content.update({"config.json": flipped(e, "config.json")}),
     (HEAD, FULL), ("config.json", "differs from the Hub's")),
    ("small-wrong-bytes-no-list-checksums", lambda e, mp: (setattr(e.hub, "no_metadata", True), e.hub.content.update(
        {"config.json": flipped(e, "config.json")})), (HEAD,), ("config.json", "differs from the Hub's")),
    ("small-too-long", lambda e, mp: e.hub.content.update(
        {"tokenizer.json": (e.repo / "tokenizer.json").read_bytes() + b" "}), (HEAD, FULL), ("tokenizer.json",)),
    ("shard-head-5xx", knob(no_metadata=True, fail_head={HEAD_SHARD}), (HEAD, FULL), ("500",)),
    ("range-short", knob(truncate={HEAD_SHARD}), (HEAD,), ("bytes instead of",)),
    ("range-long", knob(long={HEAD_SHARD}), (HEAD,), ("announced",)),
    ("range-long-chunked", knob(long_chunked={HEAD_SHARD}), (HEAD,), ("more than",)),
    ("range-ignored", knob(ignore_range={HEAD_SHARD}), (HEAD,), ("ignored the Range request",)),
    ("range-cut", knob(cut={HEAD_SHARD: 50_000}), (HEAD,), ("broke after 50000", "kept")),
    ("size-huge", knob(size_claim={HEAD_SHARD: 10**12}), (HEAD,), (HEAD_SHARD, "after its last tensor")),
    ("size-huge", knob(size_claim={HEAD_SHARD: 10**12}), (FULL,), (REPO,)),  # huggingface_hub refuses it
    ("etag-wrong", knob(etag_claim={HEAD_SHARD: "0" * 64}), (HEAD,), ("ETag",)),
    ("commit-answer-wrong", knob(answer_commit="f" * 40), (HEAD,), ("answered for commit",)),
    ("header-poisoned", lambda e, mp: e.hub.poison.update({HEAD_SHARD: [(8, header_len(e))]}), (HEAD, FULL),
     (HEAD_SHARD, "header")),
    ("unreachable", lambda e, mp: mp.setenv("HF_ENDPOINT", closed_port()), (HEAD, FULL), ("could not reach",)),
]
PARAMS = [pytest.param(setup, cmd, needles, id=f"{name}-{cmd[0]}")
          for name, setup, cmds, needles in CASES for cmd in cmds]


@pytest.mark.parametrize("setup,cmd,needles", PARAMS)
def test_hostile_hub_is_refused_in_one_line_and_writes_nothing_outside_the_cache(
        env: Env, monkeypatch: pytest.MonkeyPatch, setup: Setup, cmd: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    setup(env, monkeypatch)
    before = tree(env.tmp)
    rc, err = env.run(*(a.replace("{out}", str(env.out)) for a in cmd))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "internal error" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    assert tree(env.tmp) == before  # no output; the victim, the repo and everything else keep their bytes
    assert largest_cached(env) < 1 << 20  # no sparse file sized by a lying server


@pytest.mark.parametrize("repo_id", ["a/..", "org/x..y", "a/b--c"])
@pytest.mark.parametrize("command", ["extract", "convert"])
def test_repo_ids_the_hub_refuses(env: Env, repo_id: str, command: str) -> None:
    rc, err = env.run(command, repo_id, "-o", str(env.out))
    assert rc == 2 and err.startswith(f"error: {repo_id}: ") and "not a valid Hub repo id" in err, err
    assert "internal error" not in err
    assert len(err.strip().splitlines()) == 1


def head_only(env: Env, *extra: str) -> None:
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q", "--force", *extra)
    assert rc == 0, err


def local_head(env: Env) -> Path:
    return convert(env.repo, outfile=env.tmp / "local.gguf", layout="head-only", progress=False, force=True).path


def ranges_of(env: Env, name: str = HEAD_SHARD) -> list[tuple[int, int]]:
    return [(a, b) for n, a, b in env.hub.ranges_ok if n == name]


def range_requests(env: Env, since: int = 0, name: str = HEAD_SHARD) -> list[tuple[int, int]]:
    """``(start, end)`` (end exclusive) of the Range requests for ``name``."""
    out = []
    for _cmd, path, rng in env.hub.requests[since:]:
        if rng and path.endswith("/" + name):
            a, b = rng.split("=")[1].split("-")
            out.append((int(a), int(b) + 1))
    return out


def test_a_cut_range_resumes_after_the_bytes_received(env: Env) -> None:
    env.hub.cut[HEAD_SHARD] = 50_000
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q")
    assert rc == 2 and "broke after 50000" in err
    a, b = range_requests(env)[-1]
    n = len(env.hub.requests)
    head_only(env)
    assert range_requests(env, n) == [(a + 50_000, b)]  # only what the cut run did not receive
    same_tensors(env.out, local_head(env))


def test_a_poisoned_header_is_dropped_and_fetched_again_once_the_server_is_fixed(env: Env) -> None:
    env.hub.poison[HEAD_SHARD] = [(8, header_len(env))]
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q")
    assert rc == 2 and "nothing of this shard is kept" in err
    env.hub.poison.clear()
    n = len(env.hub.requests)
    head_only(env)  # no --force-download needed: the bad header was not kept
    assert (0, 8) in range_requests(env, n)
    same_tensors(env.out, local_head(env))


def test_force_download_fetches_again_what_cannot_be_verified(env: Env) -> None:
    """Range bytes of tensors have no checksum on the Hub (only whole files do): poisoned tensor bytes of
    the right length get through. --force-download drops the cached entry and fetches it anew."""
    env.hub.poison[HEAD_SHARD] = [(header_len(env), header_len(env) + 64)]
    head_only(env)
    env.hub.poison.clear()
    n = len(env.hub.ranges_ok)
    head_only(env)
    assert env.hub.ranges_ok[n:] == []  # cached ranges are reused as long as they hash the same
    head_only(env, "--force-download")
    assert ranges_of(env)[-1][1] - ranges_of(env)[-1][0] > 100_000  # the head's range was fetched again
    same_tensors(env.out, local_head(env))


def test_bytes_changed_in_the_cache_are_fetched_again(env: Env) -> None:
    head_only(env)
    sparse = next((env.tmp / "gm-cache").rglob(HEAD_SHARD))
    with open(sparse, "r+b") as fh:  # damage a fetched range on disk
        fh.seek(header_len(env) + 100)
        fh.write(b"\xff" * 16)
    n = len(env.hub.ranges_ok)
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q", "--force")
    assert rc == 0 and "changed on disk" in err
    assert ranges_of(env)[-1][1] - ranges_of(env)[-1][0] > 100_000 and len(env.hub.ranges_ok) > n
    same_tensors(env.out, local_head(env))


@pytest.mark.parametrize("damage", [b"{not json", b'{"format": 2, "files": {"../x.safetensors": {}}}',
                                    b'{"format": 2, "files": {"a.safetensors": {"size": 1, "etag": null, '
                                    b'"ranges": [[0, 5, "zz"]], "ready": true}}}', b"[]", b"\xff\xfe"])
def test_a_damaged_ranges_file_is_discarded(env: Env, damage: bytes) -> None:
    head_only(env)
    state = next((env.tmp / "gm-cache").rglob(".gguf-mtp-ranges.json"))
    state.write_bytes(damage)
    n = len(env.hub.ranges_ok)
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q", "--force")
    assert rc == 0 and "discarded" in err and "Traceback" not in err and "internal error" not in err
    assert len(env.hub.ranges_ok) > n
    same_tensors(env.out, local_head(env))


def test_a_new_version_of_a_shard_invalidates_its_cached_ranges(env: Env) -> None:
    head_only(env)
    data = bytearray((env.repo / HEAD_SHARD).read_bytes())
    data[-1] ^= 0xFF  # same size, new sha256: a new ETag
    (env.repo / HEAD_SHARD).write_bytes(bytes(data))
    n = len(env.hub.requests)
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q", "--force")
    assert rc == 0 and "another version" in err
    assert (0, 8) in range_requests(env, n)


def test_an_ignored_range_is_noticed_before_the_body(env: Env) -> None:
    env.hub.ignore_range.add(HEAD_SHARD)  # the stand-in holds the body back until released
    t = time.monotonic()
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q")
    assert rc == 2 and "ignored the Range request" in err
    assert time.monotonic() - t < 20 and env.hub.served[HEAD_SHARD] == 0


def test_a_huge_size_never_becomes_a_huge_file(env: Env) -> None:
    env.hub.size_claim[HEAD_SHARD] = 10**12
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q")
    assert rc == 2 and "after its last tensor" in err
    assert largest_cached(env) < 1 << 20


def test_cli_process_exits_2_and_is_not_killed(env: Env) -> None:
    """The same property out of process: a real exit status, not a signal."""
    env.hub.extra_files[UP + VICTIM] = b"x"
    before = tree(env.tmp)
    proc_env = {**os.environ, "HF_HUB_CACHE": str(env.tmp / "hf-cache")}
    p = subprocess.run([sys.executable, "-c", "from gguf_mtp_cli.main import run; run()", "extract", REPO,
                        "--head-only", "-o", str(env.out)], capture_output=True, text=True, env=proc_env,
                       timeout=300)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1
    assert "internal error" not in p.stderr
    assert tree(env.tmp) == before


def test_full_convert_checks_what_it_downloaded(env: Env) -> None:
    """The full download path (huggingface_hub's snapshot) gets the same name and checksum checks, and
    --force-download really downloads again."""
    env.hub.content["tokenizer_config.json"] = flipped(env, "tokenizer_config.json")
    rc, err = env.run("convert", REPO, "-o", str(env.out), "-q")
    assert rc == 2 and "--force-download" in err
    env.hub.content.clear()
    rc, err = env.run("convert", REPO, "-o", str(env.out), "-q", "--force-download")
    assert rc == 0, err
    shutil.rmtree(env.tmp / "gm-cache", ignore_errors=True)


def test_an_interrupt_mid_range_keeps_the_bytes_received(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or a signal turned into an exception) in the middle of the head's range: what arrived is kept."""
    from gguf_mtp.checkpoint.remote import RemoteRepo

    orig = RemoteRepo.fetch_range

    def interrupted(self, f, start, end, sink):  # type: ignore[no-untyped-def]
        def stop(off: int, chunk: bytes) -> None:
            sink(off, chunk)
            raise KeyboardInterrupt

        return orig(self, f, start, end, stop if end - start > 100_000 else sink)

    monkeypatch.setattr(RemoteRepo, "fetch_range", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert(REPO, outfile=env.out, layout="head-only", progress=False)
    monkeypatch.setattr(RemoteRepo, "fetch_range", orig)
    a, b = range_requests(env)[-1]
    n = len(env.hub.requests)
    head_only(env)
    (a2, b2), = range_requests(env, n)
    assert a < a2 < b and b2 == b
    same_tensors(env.out, local_head(env))


def test_redirects_to_a_cdn_like_the_real_hub(env: Env) -> None:
    """LFS files: the Hub answers 302 with the file's commit, sha256 and size, and a CDN with its own ETag
    serves the bytes. The checks read the Hub's answer (the redirect), so this works, and a wrong sha256
    on the redirect is still refused."""
    env.hub.redirect_lfs = True
    head_only(env)
    assert any(path.startswith("/cdn/") and rng for _c, path, rng in env.hub.requests)
    same_tensors(env.out, local_head(env))
    env.hub.etag_claim[HEAD_SHARD] = "0" * 64
    shutil.rmtree(env.tmp / "gm-cache")
    rc, err = env.run("extract", REPO, "--head-only", "-o", str(env.out), "-q", "--force")
    assert rc == 2 and "ETag" in err and HEAD_SHARD in err
