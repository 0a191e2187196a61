"""The output policy and OS errors, through the real CLI: every input of a command refused as its output
(each checkpoint file, symlinks, hard links, imatrix, model and sidecar of a run), special files (devices,
FIFOs) as outputs and as inputs, read-only folders, a full disk, a file size limit, concurrent writers, stale
temp files. Each case asserts the contract of :mod:`tests.reliability`: one-line ``error:``, exit 2, nothing
outside the named output changes, inputs keep their bytes."""

from __future__ import annotations

import os
import resource
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gguf_mtp import convert
from gguf_mtp.errors import OutputError, OutputExistsError
from gguf_mtp.ggufio import atomic
from gguf_mtp.ggufio.atomic import atomic_paths, check_output, remove_stale
from gguf_mtp.ggufio.model import GGUFModel

from .reliability import can_unshare_mount, changes, cli, dead_pid, deadline, spawn, sub, temps, tree
from .test_hub import REPO, hub  # noqa: F401 - the Hub stand-in fixture
from tests import helpers

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: runs `run` and `quantize`

CK_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
            "generation_config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors"]


@pytest.fixture()
def ck(checkpoint, tmp_path: Path) -> Path:
    """A private copy of a two-shard qwen35 checkpoint with every file a release has."""
    root = shutil.copytree(checkpoint("qwen35"), tmp_path / "ck")
    (root / "chat_template.json").write_text('{"chat_template": "{{ messages }}"}')
    (root / "generation_config.json").write_text('{"do_sample": false}')
    assert sorted(p.name for p in root.iterdir()) == sorted(CK_FILES)
    return root


@pytest.mark.parametrize("name", CK_FILES)
def test_convert_refuses_every_checkpoint_file_as_output(ck: Path, capsys, name: str) -> None:
    before = tree(ck)
    rc, err = cli(capsys, ["convert", ck, "-o", ck / name, "--force", "-q"])
    assert rc == 2 and "would overwrite an input" in err
    assert tree(ck) == before


def test_inputs_reached_through_symlinks_and_hard_links(ck: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "via-symlink.gguf").symlink_to(ck / "tokenizer.json")
    os.link(ck / "model-00002-of-00002.safetensors", out / "via-hardlink.gguf")
    before = tree(tmp_path)
    for name in ("via-symlink.gguf", "via-hardlink.gguf"):
        rc, err = cli(capsys, ["convert", ck, "-o", out / name, "--force", "-q"])
        assert rc == 2 and "would overwrite an input" in err
    assert tree(tmp_path) == before


def test_hub_snapshot_blobs_are_inputs(ck: Path, tmp_path: Path, capsys) -> None:
    """A Hugging Face cache snapshot: the folder holds symlinks into blobs/; the blobs are inputs too."""
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for f in ck.iterdir():
        shutil.copy(f, blobs / f.name)
        (snap / f.name).symlink_to(blobs / f.name)
    before = tree(tmp_path)
    rc, err = cli(capsys, ["convert", snap, "-o", blobs / "config.json", "--force", "-q"])
    assert rc == 2 and "would overwrite an input" in err
    assert tree(tmp_path) == before


def test_gguf_commands_refuse_their_inputs(converted, tmp_path: Path, capsys) -> None:
    bundled = shutil.copy(converted("qwen35", "bundled"), tmp_path / "m.gguf")
    trunk = shutil.copy(converted("qwen35", "trunk-only"), tmp_path / "t.gguf")
    split = helpers.reshard(trunk, tmp_path / "s.gguf", shards=2)
    side = shutil.copy(converted("qwen35", "head-only"), tmp_path / "m-MTP.gguf")
    (tmp_path / "link.gguf").symlink_to(bundled)
    os.link(bundled, tmp_path / "hard.gguf")
    os.link(trunk, tmp_path / "hard-trunk.gguf")
    before = tree(tmp_path)
    cases = [
        ["extract", bundled, "-o", bundled],
        ["extract", bundled, "--head-only", "-o", tmp_path / "link.gguf"],
        ["extract", bundled, "--strip", "-o", tmp_path / "hard.gguf"],
        ["extract", side, "--onto", trunk, "-o", side],
        ["extract", side, "--onto", trunk, "-o", tmp_path / "hard-trunk.gguf"],
        ["extract", side, "--onto", split[0], "-o", split[1]],  # the output set is the target's shards
        ["quantize", bundled, bundled, "Q4_K_M"],
        ["quantize", bundled, tmp_path / "link.gguf", "Q4_K_M"],
    ]
    for argv in cases:
        rc, err = cli(capsys, argv + ["--force"])
        assert rc == 2 and "would overwrite an input" in err, argv
    assert tree(tmp_path) == before


def test_quantize_refuses_its_imatrix_and_reports_a_missing_one(converted, tmp_path: Path, capsys) -> None:
    from .test_quantize import WIDE, write_imatrix

    src = converted("qwen35", "bundled", "bf16", mtp_type="bf16", **WIDE)
    im = tmp_path / "imatrix.gguf"
    write_imatrix(im, src)
    before = tree(tmp_path)
    rc, err = cli(capsys, ["quantize", src, im, "IQ4_XS", "--imatrix", im, "--force"])
    assert rc == 2 and "would overwrite an input" in err
    rc, err = cli(capsys, ["quantize", src, tmp_path / "o.gguf", "IQ4_XS", "--imatrix", tmp_path / "missing.dat"])
    assert rc == 2 and "missing.dat: no such file" in err
    assert tree(tmp_path) == before


def _stats_refused(capsys, argv: list[str], needle: str) -> None:
    rc, err = cli(capsys, argv)
    assert rc == 2 and needle in err, err
    assert "tok/s" not in err and "MTP:" not in err  # refused before the model ran


def test_run_stats_json_refuses_inputs_and_bad_folders_before_generating(converted, tmp_path: Path, capsys) -> None:
    trunk = shutil.copy(converted("qwen35", "trunk-only"), tmp_path / "m.gguf")
    side = shutil.copy(converted("qwen35", "head-only"), tmp_path / "m-MTP.gguf")  # found beside the model
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("The quick")
    before = tree(tmp_path)
    run = ["run", trunk, "-n", "4", "-c", "256", "--force", "--stats-json"]
    _stats_refused(capsys, run + [trunk, "-p", "x"], "would overwrite an input")
    _stats_refused(capsys, run + [side, "-p", "x"], "would overwrite an input")  # the auto-found sidecar
    _stats_refused(capsys, run + [prompt, "-f", prompt], "would overwrite an input")
    _stats_refused(capsys, run + [tmp_path / "no-such-folder" / "s.json", "-p", "x"], "output folder does not exist")
    _stats_refused(capsys, run + [tmp_path, "-p", "x"], "is a directory")
    assert tree(tmp_path) == before
    stats = tmp_path / "s.json"
    stats.write_text("{}")
    _stats_refused(capsys, ["run", trunk, "-p", "x", "-n", "2", "--stats-json", stats], "pass --force")
    rc, _ = cli(capsys, ["run", trunk, "-p", "x", "-n", "2", "-c", "256", "--stats-json", stats, "--force"])
    assert rc == 0 and '"drafted"' in stats.read_text()
    assert changes(before, tree(tmp_path)) == {"s.json"}



def test_run_two_outputs_naming_one_file_are_refused_before_any_work(converted, tmp_path: Path, capsys) -> None:
    """Issue 23: --spec-draft-profile-out and --stats-json naming one file were refused only after the whole answer
    (or, with --force, the profile replaced the statistics). Now refused first, even with --force, however spelled;
    a model that does not exist shows nothing was opened before."""
    model = converted("qwen35", "bundled")
    (tmp_path / "link.json").symlink_to(tmp_path / "s.json")  # dangling: the same file once written
    for missing in (True, False):
        m = tmp_path / "no-such-model.gguf" if missing else model
        auto = ["run", m, "-p", "x", "-n", "2", "-c", "256", "--spec-draft-n-max", "auto"]
        for other in (tmp_path / "s.json", tmp_path / "." / "s.json", tmp_path / "link.json"):
            for force in ([], ["--force"]):
                _stats_refused(capsys, auto + ["--stats-json", tmp_path / "s.json", "--spec-draft-profile-out",
                                               other] + force, "--stats-json and --spec-draft-profile-out name the same")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json"]
    (tmp_path / "s.json").write_text("{}")
    _stats_refused(capsys, ["run", tmp_path / "no-such-model.gguf", "-p", "x", "--spec-draft-n-max", "auto",
                            "--spec-draft-profile-out", tmp_path / "s.json"], "output exists; pass --force")


def _char_device(tmp_path: Path) -> Path:
    """A character device to write at: a private copy of /dev/null's node when root (so that a regression
    cannot replace the machine's /dev/null), /dev/null itself otherwise (we could not replace it anyway)."""
    if os.geteuid() == 0:
        dev = tmp_path / "null"
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return dev
    return Path("/dev/null")


def test_special_files_as_outputs_are_refused_even_with_force(ck: Path, converted, tmp_path: Path) -> None:
    dev = _char_device(tmp_path)
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    gguf = converted("qwen35", "bundled")
    before, dev_before = tree(tmp_path), os.stat(dev)
    for out in (dev, fifo):  # in a subprocess: writing through a FIFO would block
        for argv in (["convert", ck, "-q"], ["extract", gguf, "-q"], ["quantize", gguf, out, "Q4_0"]):
            argv = argv + (["-o", out] if argv[0] != "quantize" else []) + ["--force"]
            r = sub(argv, timeout=90)
            assert r.returncode == 2 and "never through special ones" in r.stderr, (argv, r.stderr)
    st = os.stat(dev)
    assert stat.S_ISCHR(st.st_mode) and (st.st_ino, st.st_rdev) == (dev_before.st_ino, dev_before.st_rdev)
    assert tree(tmp_path) == before


def test_special_files_as_inputs_fail_at_once(ck: Path, converted, tmp_path: Path, capsys) -> None:
    """A FIFO (no writer) as a model, shard, config, tokenizer, imatrix or prompt file: one line, no hang."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    model = converted("qwen35", "bundled")
    cases: list[list] = [["inspect", fifo], ["extract", fifo], ["run", fifo, "-p", "x"],
                         ["run", model, "-f", fifo, "-n", "1"], ["quantize", model, tmp_path / "q.gguf", "Q4_0",
                                                                 "--imatrix", fifo]]
    for name in ("config.json", "tokenizer.json", "model-00002-of-00002.safetensors", "chat_template.jinja"):
        c = shutil.copytree(ck, tmp_path / f"ck-{name}")
        (c / name).unlink()
        os.mkfifo(c / name)
        cases.append(["convert", c, "-o", tmp_path / f"{name}.gguf", "-q"])
    before = tree(tmp_path)
    for argv in cases:
        with deadline(60):
            rc, err = cli(capsys, argv)
        assert rc == 2 and "FIFO (named pipe), not a regular file" in err, (argv, err)
    assert tree(tmp_path) == before
    with deadline(60):
        rc, err = cli(capsys, ["inspect", tmp_path])
    assert rc == 2 and "is a directory" in err


def test_existing_outputs_folders_and_missing_folders(ck: Path, converted, tmp_path: Path, capsys) -> None:
    out = tmp_path / "o.gguf"
    out.write_bytes(b"mine")
    (tmp_path / "afile").write_text("x")
    gguf = converted("qwen35", "bundled")
    before = tree(tmp_path)
    for argv, needle in [
        (["convert", ck, "-o", out], "output exists; pass --force"),
        (["extract", gguf, "-o", out], "output exists; pass --force"),
        (["extract", gguf, "-o", tmp_path, "--force"], "is a directory"),
        (["extract", gguf, "-o", tmp_path / "nope" / "o.gguf"], "output folder does not exist"),
        (["extract", gguf, "-o", tmp_path / "afile" / "o.gguf"], "not a folder"),
    ]:
        rc, err = cli(capsys, argv + ["-q"])
        assert rc == 2 and needle in err, (argv, err)
    assert tree(tmp_path) == before


def _private_tmpfs(folder: Path, options: str, argv: list) -> subprocess.CompletedProcess:
    """Run the CLI with a tmpfs mounted at ``folder`` in a private mount namespace; prints the folder's
    listing afterwards (the mount goes away with the namespace)."""
    script = ('mount -t tmpfs -o "$1" tmpfs "$2" || exit 99; shift 2; "$@"; rc=$?; echo "LEFT:$(ls -A "$DIR")"; '
              'exit $rc')
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", options, str(folder),
                        sys.executable, "-m", "gguf_mtp_cli.main"] + [str(a) for a in argv],
                       capture_output=True, text=True, timeout=180, env=dict(os.environ, DIR=str(folder)))
    assert r.returncode != 99, r.stderr
    return r


@pytest.mark.skipif(not can_unshare_mount(), reason="cannot mount a private tmpfs here (unshare -rm)")
def test_full_disk_on_a_small_tmpfs(ck: Path, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    before = tree(ck)
    r = _private_tmpfs(disk, "size=256k", ["convert", ck, "-o", disk / "o.gguf", "-q"])
    assert r.returncode == 2 and "o.gguf: No space left on device (ENOSPC); free some space" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout.split("LEFT:")[-1].strip() == ""  # nothing left behind
    assert tree(ck) == before


@pytest.mark.skipif(not can_unshare_mount(), reason="cannot mount a private tmpfs here (unshare -rm)")
def test_read_only_file_system(ck: Path, converted, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    for argv in (["convert", ck, "-o", ro / "o.gguf", "-q"], ["extract", converted("qwen35", "bundled"), "-o",
                                                               ro / "o.gguf", "-q"]):
        r = _private_tmpfs(ro, "ro,size=1m", argv)
        assert r.returncode == 2 and "read-only file system" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0555 folder; the tmpfs case covers this")
def test_folder_without_write_permission(ck: Path, tmp_path: Path, capsys) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        rc, err = cli(capsys, ["convert", ck, "-o", ro / "o.gguf", "-q"])
        assert rc == 2 and "no permission" in err
        assert not list(ro.iterdir())
    finally:
        ro.chmod(0o755)


def test_file_size_limit_gives_efbig_and_leaves_nothing(ck: Path, tmp_path: Path) -> None:
    """ENOSPC's twin that needs no mount: RLIMIT_FSIZE makes the write fail with EFBIG mid-file."""
    out = tmp_path / "out"
    out.mkdir()
    before = tree(ck)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    for argv in (["convert", ck, "-o", out / "o.gguf", "-q", "--outtype", "f32"],):
        r = sub(argv, preexec_fn=limit, env=env)
        assert r.returncode == 2 and f"{out / 'o.gguf'}: File too large (EFBIG)" in r.stderr, r.stderr
    assert not list(out.iterdir())
    assert tree(ck) == before


def test_concurrent_writers_exactly_one_wins(ck: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.gguf"
    procs = [spawn(["convert", ck, "-o", out, "-q", "--outtype", "q8_0"]) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], results
    assert "output exists" in next(err for rc, err in results if rc == 2)
    assert GGUFModel(out).tensors and not temps(tmp_path)


def test_atomic_paths_link_never_replaces_a_concurrent_result(tmp_path: Path) -> None:
    """Two writers past their checks at once: the second commit finds the first's file and gives up."""
    a, b = tmp_path / "o.gguf", tmp_path / "o-00002-of-00002.gguf"
    check_output(a, force=False)
    with pytest.raises(OutputExistsError, match="written by another process meanwhile"):
        with atomic_paths([a]) as (ta,):  # the slowest writer
            ta.write_bytes(b"first")
            with pytest.raises(OutputExistsError, match="written by another process meanwhile"):
                with atomic_paths([b, a]) as (tb, tb2):  # a split set: all or nothing
                    tb.write_bytes(b"second")
                    tb2.write_bytes(b"second")
                    with atomic_paths([a]) as (t3,):  # the fastest: it wins
                        t3.write_bytes(b"third")
    assert a.read_bytes() == b"third" and not b.exists() and not temps(tmp_path)
    with atomic_paths([a], force=True) as (t,):
        t.write_bytes(b"forced")
    assert a.read_bytes() == b"forced" and not temps(tmp_path)
    with pytest.raises(OutputError, match="input"):
        check_output(a, force=True, inputs=[a])


def test_stale_temp_files_are_removed_by_the_next_run(ck: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    old = time.time() - 3600
    gone, alive = dead_pid(), os.getppid()
    stale = [out_dir / f".o.gguf.{gone}.abcd_123.partial",                       # a SIGKILLed convert
             out_dir / f"..o.gguf.{gone}.abcdefgh.partial.{gone}.zyxwvuts.partial",  # its nested scratch
             out_dir / ".o.gguf.k2j4h5g6.partial"]                                # an older version's
    keep = [out_dir / f".o.gguf.{alive}.abcdefgh.partial",   # a live writer's
            out_dir / f".other.gguf.{gone}.abcdefgh.partial",  # another output's
            out_dir / ".o.gguf.notours.partial", out_dir / "o.gguf.partial"]
    for p in stale + keep:
        p.write_bytes(b"x" * 10)
        os.utime(p, (old, old))
    fresh = out_dir / f".o.gguf.{gone}.freshnew.partial"  # newer than this process: not provably stale
    fresh.write_bytes(b"x")
    monkeypatch.setattr(atomic, "PROCESS_START", time.time() - 1)
    os.utime(fresh, None)
    rc, _ = cli(capsys, ["convert", ck, "-o", out_dir / "o.gguf", "-q"])
    assert rc == 0
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in keep + [fresh])
    assert remove_stale(out_dir, "o.gguf") == []


def test_extract_onto_from_a_repo_leaves_no_intermediate(hub, converted, tmp_path: Path, capsys) -> None:
    """The fetched head of `extract REPO --onto` is a scratch file beside the output: gone after success,
    after a refusal, and refused before any download when the output exists."""
    out = tmp_path / "out"
    out.mkdir()
    trunk = convert(hub.local, outfile=tmp_path / "trunk.gguf", outtype="q8_0", layout="trunk-only",
                    progress=False).path
    (out / "g.gguf").write_bytes(b"mine")
    rc, err = cli(capsys, ["extract", REPO, "--onto", trunk, "-o", out / "g.gguf", "-q"])
    assert rc == 2 and "output exists" in err and not hub.requests  # refused before the download
    other = converted("qwen35moe", "trunk-only")  # another model: the graft is refused after the fetch
    rc, err = cli(capsys, ["extract", REPO, "--onto", other, "-o", out / "h.gguf", "-q"])
    assert rc == 2 and f"{REPO} (its MTP head) is 'qwen35'" in err and ".partial" not in err and hub.requests
    rc, err = cli(capsys, ["extract", REPO, "--onto", trunk, "-o", out / "g.gguf", "-q", "--force"])
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == ["g.gguf"]
