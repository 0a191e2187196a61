"""gguf-mtp's llama.cpp patch set (patches/llama.cpp): every patch file names its marker and runtime/patches.py
knows it; scripts/setup.sh applies them to the sdist before the build, refuses in one line a patch that does not
apply (nothing built, nothing cached) and keys the wheel cache by their content, with GGUF_MTP_PATCHES=0 keeping
the stock key; the loaded library's markers say which patches it carries, and the qwen3next rollback choice
follows them. The library-facing tests hold for a stock and a patched build alike (.ci/run runs them on both)."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gguf_mtp.runtime import llama, patches
from gguf_mtp.runtime.llama import Context, Model
from gguf_mtp.runtime.rollback import open_target
from tests.test_setup_cache import CPU_ONLY, entries, n_calls, setup_sh

from .test_runtime import lossless_spec

ROOT = Path(__file__).resolve().parents[1]
PATCH_DIR = ROOT / "patches/llama.cpp"
FILES = sorted(PATCH_DIR.glob("*.patch"))  # what setup.sh applies
ALL = sorted([*FILES, *PATCH_DIR.glob("proposed/*.patch")], key=lambda f: f.name)  # GGUF_MTP_PATCHES=proposed
#: the patch set setup.sh applied to this venv's wheel (written beside the venv; absent for other libraries)
RECORD = Path(sys.prefix) / ".gguf-mtp-llama-patches"
#: CI names what the library it tests must carry (a comma list, or "none")
EXPECT_ENV = "GGUF_MTP_EXPECT_PATCHES"


def header(path: Path) -> dict[str, str]:
    """The ``Key: value`` lines before the diff."""
    head = path.read_text().split("\n--- a/", 1)[0]
    return dict(m.groups() for m in re.finditer(r"^([\w -]+): (.*)$", head, re.M))


def test_every_patch_file_is_known_and_exports_its_marker() -> None:
    assert FILES, "patches/llama.cpp holds no patch"
    assert [p.name for p in patches.KNOWN] == [re.sub(r"^\d{4}-", "", f.stem) for f in ALL]
    assert len({f.name[:4] for f in ALL}) == len(ALL)  # one number each
    for f, known in zip(ALL, patches.KNOWN, strict=True):
        h = header(f)
        assert h.get("gguf-mtp patch") == known.name and h.get("Marker") == known.marker, (f.name, h)
        assert {"What", "Why", "Upstream"} <= h.keys(), f.name
        # the files whose added lines define the marker: at least one, and a back-end's patch defines it in that
        # back-end's sources (the library only its builds have)
        where = {path for path, lines in added_by_file(f).items()
                 if any(re.search(rf"\bvoid {known.marker}\(void\) \{{\}}", ln) for ln in lines)}
        assert where, f.name
        assert all(w.startswith(f"ggml/src/ggml-{known.backend.lower()}/") for w in where) if known.backend else \
            not any(re.match(r"ggml/src/ggml-(cuda|vulkan|metal|sycl|opencl)/", w) for w in where), (f.name, where)


def added_by_file(patch: Path) -> dict[str, list[str]]:
    """Each file's added lines in a patch."""
    out: dict[str, list[str]] = {}
    cur: list[str] = []
    for ln in patch.read_text().splitlines():
        if ln.startswith("+++ b/"):
            cur = out.setdefault(ln[6:], [])
        elif ln.startswith("+") and not ln.startswith("+++"):
            cur.append(ln[1:])
    return out


# --- setup.sh applies them -----------------------------------------------------------------------------------

def pre_images(patch: Path, break_context: bool = False) -> dict[str, str]:
    """What each file the patch touches must hold for it to apply: its hunks' old lines (patch finds them at
    any offset). ``break_context`` changes one context line, as an upstream edit would."""
    files: dict[str, list[str]] = {}
    cur: list[str] = []
    for ln in patch.read_text().splitlines():
        if ln.startswith("--- a/"):
            cur = files.setdefault(ln[6:], [])
        elif ln.startswith("@@"):
            cur.append("// (elided)")
        elif cur is not None and ln[:1] in (" ", "-") and not ln.startswith("---"):
            cur.append(ln[1:])
    if break_context:
        lines = next(iter(files.values()))
        i = next(i for i, s in enumerate(lines) if s.strip() and s != "// (elided)")
        lines[i] += " // changed upstream"
    return {k: "\n".join(v) + "\n" for k, v in files.items()}


def hunks(patch: Path) -> dict[str, list[tuple[list[str], list[str]]]]:
    """Each touched file's hunks as (old lines, new lines), context included."""
    files: dict[str, list[tuple[list[str], list[str]]]] = {}
    cur: list[tuple[list[str], list[str]]] = []
    for ln in patch.read_text().splitlines():
        if ln.startswith("--- a/"):
            cur = files.setdefault(ln[6:], [])
        elif ln.startswith("@@"):
            cur.append(([], []))
        elif cur and ln[:1] in (" ", "-", "+") and not ln.startswith(("---", "+++")):
            old, new = cur[-1]
            if ln[0] != "+":
                old.append(ln[1:])
            if ln[0] != "-":
                new.append(ln[1:])
    return files


def end_anchored(patch: Path) -> set[str]:
    """The files where ``patch`` has a hunk with less trailing context than leading context (none, or a file's
    last lines): patch(1) then applies it at the end of the file only, so nothing may follow it there."""
    out: set[str] = set()
    name, body = "", []
    for ln in [*patch.read_text().splitlines(), "@@"]:
        if ln.startswith(("@@", "--- a/", "diff ")):
            marks = [i for i, x in enumerate(body) if x[:1] in ("+", "-")]
            if name and marks and len(body) - 1 - marks[-1] < marks[0]:
                out.add(name)
            body = []
            if ln.startswith("--- a/"):
                name = ln[6:]
        elif ln[:1] in (" ", "+", "-") and not ln.startswith(("+++", "---")):
            body.append(ln)
    return out


def stacked_pre_images(files: list[Path]) -> dict[str, str]:
    """What the sdist must hold for ``files`` to apply in order. A file an earlier patch touched too: where the later
    patch's pre-image holds the earlier patch's hunks (they nest), it replaces what the file held, with those hunks
    undone in it; where it holds none of them (they are apart), it goes after what the file held. A later hunk whose
    context takes in part of an earlier hunk's added lines is neither, and stops the test: write the patches apart.
    (It goes before what the file held where an earlier patch's hunk there is anchored at the end of the file.)"""
    out: dict[str, str] = {}
    for i, f in enumerate(files):
        for name, text in pre_images(f).items():
            lines = text.splitlines()
            apart = False
            for earlier in reversed(files[:i]):
                for old, new in hunks(earlier).get(name, []):
                    at = next((j for j in range(len(lines) - len(new) + 1) if lines[j:j + len(new)] == new), None)
                    if at is not None:
                        lines[at:at + len(new)] = old
                        continue
                    # lines only the earlier hunk adds, long enough to be its own (not a brace or a blank)
                    added = {ln for ln in set(new) - set(old) if len(ln.strip()) >= 16}
                    shared = [ln for ln in lines if ln in added]
                    assert not shared, (earlier.name, f.name, name, shared[:3])  # partly inside the later hunk
                    apart = True
            if apart and name in out:
                held = out[name].splitlines()
                at_end = any(name in end_anchored(earlier) for earlier in files[:i])
                lines = lines + ["// (elided)"] + held if at_end else held + ["// (elided)"] + lines
            out[name] = "\n".join(lines) + "\n"
    return out


def fake_sdist(path: Path, files: dict[str, str]) -> Path:
    """A llama-cpp-python sdist holding ``files`` under vendor/llama.cpp (only what the patches touch)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_python-0.3.36/vendor/llama.cpp/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def patched_key(cmake_args: str, files: list[Path]) -> str:
    digest = "".join(f"{hashlib.sha1(f.read_bytes()).hexdigest()}  {f.relative_to(PATCH_DIR)}\n" for f in files)
    h = hashlib.sha1(digest.encode()).hexdigest()[:12]
    return hashlib.sha1(f"0.3.36|{cmake_args}|llama.cpp-patches@{h}".encode()).hexdigest()[:12]


def stock_key(cmake_args: str) -> str:
    return hashlib.sha1(f"0.3.36|{cmake_args}".encode()).hexdigest()[:12]


@pytest.mark.parametrize("switch", ["1", "proposed"])
def test_patches_reach_the_build_and_key_the_cache(tmp_path: Path, switch: str) -> None:
    cache, calls, seen = tmp_path / "cache", tmp_path / "calls", tmp_path / "seen"
    applied = FILES if switch == "1" else ALL
    files = stacked_pre_images(ALL)
    sdist = fake_sdist(tmp_path / "sdist.tar.gz", files)
    before = sdist.read_bytes()
    # the build sees the patched source as $2 and keeps a copy of it
    build = f'echo built >> "{calls}"; cp -r "$2/vendor/llama.cpp" "{seen}"'
    r = setup_sh(cache, CPU_ONLY, None, calls, GGUF_MTP_PATCHES=switch, GGUF_MTP_SDIST=str(sdist),
                 GGUF_MTP_WHEEL_BUILD_CMD=build)
    names = ", ".join(re.sub(r"^\d{4}-", "", f.stem) for f in applied)
    assert f"setup: llama.cpp patches: {names}" in r.stderr and f"applied patches/llama.cpp: {names}" in r.stderr
    assert f"cached in {cache / patched_key(CPU_ONLY, applied)}" in r.stderr and n_calls(calls) == 1, r.stderr
    for p in patches.KNOWN:  # the applied ones' markers are in the source the build gets, the others' not
        found = any(p.marker in f.read_text() for f in seen.rglob("*") if f.is_file())
        assert found == (p.name in names.split(", ")), p.marker
    assert r.returncode == 1 and entries(cache) == []  # the stub made no wheel: nothing cached, nothing left
    assert sdist.read_bytes() == before  # the input is never modified

    r = setup_sh(cache, CPU_ONLY, None, calls, GGUF_MTP_PATCHES="0", GGUF_MTP_SDIST=str(sdist))
    assert "setup: llama.cpp patches: none (stock)" in r.stderr and "applied" not in r.stderr
    assert f"cached in {cache / stock_key(CPU_ONLY)}" in r.stderr  # the key a setup.sh without patches used


def test_a_patch_that_does_not_apply_stops_setup_in_one_line(tmp_path: Path) -> None:
    cache, calls = tmp_path / "cache", tmp_path / "calls"
    sdist = fake_sdist(tmp_path / "sdist.tar.gz", pre_images(FILES[0], break_context=True))
    r = setup_sh(cache, CPU_ONLY, None, calls, GGUF_MTP_PATCHES="1", GGUF_MTP_SDIST=str(sdist))
    assert r.returncode == 1 and n_calls(calls) == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert lines == [f"setup: error: patch patches/llama.cpp/{FILES[0].name} does not apply to llama-cpp-python "
                     "0.3.36's vendor/llama.cpp: nothing was built or cached (update the patch, or "
                     "GGUF_MTP_PATCHES=0 for the stock library)"], r.stderr
    assert entries(cache) == []  # no half-patched tree, no build folder


def source_only(dest: Path | str, sdist: Path, switch: str = "1", cwd: Path = ROOT) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHON": sys.executable, "GGUF_MTP_PATCHES": switch, "GGUF_MTP_SDIST": str(sdist)}
    return subprocess.run(["bash", str(ROOT / "scripts/setup.sh"), "--source-only", str(dest)], env=e, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_source_only_writes_the_patched_tree_once(tmp_path: Path) -> None:
    """``setup.sh --source-only DIR`` (scripts/backend-ops-check.sh builds test-backend-ops from it): the sdist's
    vendor/llama.cpp with the shipped patches, every marker in it; never over an existing folder; a patch that
    does not apply leaves nothing."""
    sdist = fake_sdist(tmp_path / "sdist.tar.gz", stacked_pre_images(ALL))
    before = sdist.read_bytes()
    out = tmp_path / "out"
    dest = out / "llama.cpp"
    r = source_only(dest, sdist)
    assert r.returncode == 0, r.stderr
    text = "".join(f.read_text() for f in dest.rglob("*") if f.is_file())
    shipped = {re.sub(r"^\d{4}-", "", f.stem) for f in FILES}
    for p in patches.KNOWN:
        assert (p.marker in text) == (p.name in shipped), p.marker
    assert sorted(x.name for x in out.iterdir()) == ["llama.cpp"] and sdist.read_bytes() == before
    # the applied set, as a venv records its wheel's (scripts/backend-ops-check.sh compares the two)
    assert (dest / ".gguf-mtp-llama-patches").read_text().split() == [re.sub(r"^\d{4}-", "", f.stem) for f in FILES]
    r = source_only(dest, sdist)
    assert r.returncode == 1 and f"setup: error: {dest} exists" in r.stderr, r.stderr
    r = source_only("rel/llama.cpp", sdist, cwd=tmp_path)  # a relative DIR is the caller's, not the repository's
    assert r.returncode == 0 and (tmp_path / "rel/llama.cpp").is_dir() and not (ROOT / "rel").exists(), r.stderr

    broken = fake_sdist(tmp_path / "broken.tar.gz", pre_images(FILES[0], break_context=True))
    r = source_only(tmp_path / "out2" / "llama.cpp", broken)
    assert r.returncode == 1 and f"patch patches/llama.cpp/{FILES[0].name} does not apply" in r.stderr, r.stderr
    assert list((tmp_path / "out2").iterdir()) == []  # no half-patched tree, no scratch folder


@pytest.mark.parametrize("where", ["cached", "downloaded"])
def test_an_sdist_with_other_bytes_is_refused(tmp_path: Path, where: str) -> None:
    """Without GGUF_MTP_SDIST the sdist comes from the cache, else from pip (a stub here, writing other bytes than
    PyPI's): either way its sha256 is checked, and a download that fails the check is not cached."""
    cache = tmp_path / "cache"
    name = "llama_cpp_python-0.3.36.tar.gz"
    if where == "cached":
        (cache / "sdist").mkdir(parents=True)
        (cache / "sdist" / name).write_bytes(b"not PyPI's bytes")
    pip = tmp_path / "python"  # `python -m pip download ... -d DIR`: leaves other bytes under the sdist's name
    pip.write_text('#!/usr/bin/env bash\nwhile [ $# -gt 0 ]; do [ "$1" = -d ] && d="$2"; shift; done\n'
                   f'mkdir -p "$d" && echo other > "$d/{name}"\n')
    pip.chmod(0o755)
    e = {k: v for k, v in os.environ.items() if k != "GGUF_MTP_SDIST"}
    e.update(PYTHON=str(pip), GGUF_MTP_WHEEL_CACHE=str(cache), GGUF_MTP_PATCHES="1")
    dest = tmp_path / "out" / "llama.cpp"
    r = subprocess.run(["bash", str(ROOT / "scripts/setup.sh"), "--source-only", str(dest)], env=e, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    if where == "cached":
        assert f"the cached {cache / 'sdist' / name} is not the sdist PyPI published" in r.stderr, r.stderr
    else:
        assert f"the downloaded {name} is not the sdist PyPI published" in r.stderr, r.stderr
        assert not (cache / "sdist").exists() or list((cache / "sdist").iterdir()) == []  # nothing cached
    assert list((tmp_path / "out").iterdir()) == []  # no scratch folder left


@pytest.mark.parametrize("content", [None, b"not a tarball", "no-vendor"])
def test_an_unusable_sdist_stops_setup(tmp_path: Path, content: bytes | str | None) -> None:
    cache, calls, sdist = tmp_path / "cache", tmp_path / "calls", tmp_path / "sdist.tar.gz"
    if content == "no-vendor":
        fake_sdist(sdist, {})
        with tarfile.open(sdist, "w:gz") as tar:  # a tarball without vendor/llama.cpp
            tar.addfile(tarfile.TarInfo("llama_cpp_python-0.3.36/README.md"), io.BytesIO(b""))
    elif isinstance(content, bytes):
        sdist.write_bytes(content)
    r = setup_sh(cache, CPU_ONLY, None, calls, GGUF_MTP_PATCHES="1", GGUF_MTP_SDIST=str(sdist))
    assert r.returncode == 1 and n_calls(calls) == 0 and entries(cache) == [], r.stderr
    want = (f"{sdist} has no llama_cpp_python-0.3.36/vendor/llama.cpp" if content == "no-vendor"
            else f"cannot unpack the llama-cpp-python sdist {sdist}")
    assert f"setup: error: {want}" in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["yes", "2", "on"])
def test_bad_patches_switch(tmp_path: Path, value: str) -> None:
    r = setup_sh(tmp_path / "cache", CPU_ONLY, None, tmp_path / "calls", GGUF_MTP_PATCHES=value)
    assert r.returncode == 2 and f"setup: error: GGUF_MTP_PATCHES={value} : use 1" in r.stderr
    assert entries(tmp_path / "cache") == []


# --- the loaded library -----------------------------------------------------------------------------------

def expected_patches() -> list[str] | None:
    """What the loaded library must carry: CI's word, else the record setup.sh left in this venv."""
    want = os.environ.get(EXPECT_ENV)
    if want is not None:
        return [] if want.strip() == "none" else [w.strip() for w in want.split(",") if w.strip()]
    if os.environ.get("LLAMA_CPP_LIB_PATH") or not RECORD.exists():
        return None
    return RECORD.read_text().split()


def test_the_loaded_library_carries_what_setup_applied() -> None:
    want = expected_patches()
    if want is None:
        pytest.skip(f"no record of this library's patches ({EXPECT_ENV} unset, {RECORD} absent)")
    # a patch of one back-end's code has its marker only in a library built with that back-end (a CPU wheel
    # applied cuda-argmax-split but has no libggml-cuda)
    built = set(llama.registry().registries())
    by_name = {p.name: p for p in patches.KNOWN}
    want = [n for n in want if not by_name[n].backend or by_name[n].backend in built]
    assert patches.names() == want
    line = patches.startup_line()
    assert line == "llama.cpp patches: " + (", ".join(want) if want else "none (stock)")


def test_the_start_up_line_names_the_patches(converted, capsys) -> None:  # type: ignore[no-untyped-def]
    """Beside the devices: line, in `run` (serve prints the same pair before it loads)."""
    from gguf_mtp_cli.main import main

    model = converted("qwen3next", "bundled", **lossless_spec(converted, "qwen3next"))
    assert main(["run", str(model), "-p", "The quick", "-n", "2", "-t", "1", "-c", "256", "--no-mtp"]) == 0
    lines = capsys.readouterr().err.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("devices: "))
    assert lines[i + 1] == patches.startup_line(), lines


def test_qwen3next_rollback_follows_the_marker(converted) -> None:  # type: ignore[no-untyped-def]
    """With qwen3next-rs-rollback loaded the target context is made once, for native rollback; without it
    the replay fallback, also made once. llama.cpp's own answer (n_rs_seq) must agree with the marker."""
    model_path = converted("qwen3next", "bundled", **lossless_spec(converted, "qwen3next"))
    made: list[tuple[int, int, bool]] = []
    with Model(model_path) as model:
        def make(n_rs_seq: int, n_seq_max: int, kv_unified: bool) -> Context:
            made.append((n_rs_seq, n_seq_max, kv_unified))
            return Context(model, n_ctx=128, n_threads=1, n_rs_seq=n_rs_seq, n_seq_max=n_seq_max,
                           kv_unified=kv_unified)

        ctx, rbs, note = open_target(model, "qwen3next", 3, make)
        try:
            native = ctx.n_rs_seq() >= 3
        finally:
            ctx.close()
    marked = "qwen3next-rs-rollback" in patches.names()
    assert native == marked, (native, patches.names())
    assert len(made) == 1, made
    if marked:
        assert [r.name for r in rbs] == ["native (n_rs_seq=3)"] and note == "" and made == [(3, 1, False)]
    else:
        assert rbs[0].name.startswith("replay") and "keeps no rollback snapshots" in note


@pytest.mark.parametrize("given", [None, "0", "1"])
def test_switches_follow_the_markers(given: str | None) -> None:
    """The runtime switches on (its variable at the patch's value, 1 but for sched-async-inputs' 2, before any
    context is made) every patch that waits for one, exactly where the loaded library carries it, leaves a value the
    user set alone, and never sets one for a patch the library lacks (a stock library: none); the whole suite then
    runs with them on wherever they are patched in."""
    import json

    switched = [p for p in patches.KNOWN if p.switch]
    assert {p.switch: p.switch_value for p in switched}[patches.ASYNC_INPUTS_ENV] == "2"
    assert {p.switch_value for p in switched if p.switch != patches.ASYNC_INPUTS_ENV} == {"1"}
    env = {k: v for k, v in os.environ.items() if k not in {p.switch for p in switched}}
    if given is not None:
        env.update({p.switch: given for p in switched})
    code = ("import json, os\nfrom gguf_mtp.runtime import llama, patches\nllama.registry()\n"
            "print(json.dumps([patches.names(),\n"
            "                  {p.switch: os.environ.get(p.switch) for p in patches.KNOWN if p.switch}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    names, values = json.loads(r.stdout)
    assert names == patches.names()
    for p in switched:
        assert values[p.switch] == (given if given is not None else (p.switch_value if p.name in names else None)), \
            p.name
