"""Default output names (issue 27): `convert` in its four layouts and `extract` (sidecar, head-only, --strip)
never pick the same name for files that differ, each sidecar pairs with its trunk by name, and the names earlier
versions wrote still pair."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gguf_mtp.file_report import inspect_file
from gguf_mtp.runtime.pairing import HeadSource, resolve

from .reliability import sub

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

CONVERT = {"bundled": [], "trunk-only": ["--no-mtp"], "mtp-only": ["--mtp"], "head-only": ["--mtp", "--head-only"]}
EXTRACT = {"mtp-only": [], "head-only": ["--head-only"], "trunk-only": ["--strip"]}


def _kind(p: Path) -> tuple[str, tuple[tuple[str, str], ...]]:
    r = inspect_file(p)
    return r.layout.value, tuple(sorted((t.name, t.type) for t in r.mtp_tensors))


def _pairs(model: Path, sidecar: Path, source: HeadSource) -> None:
    p = resolve(model)
    assert p.source == source and p.sidecar is not None and p.sidecar.path.name == sidecar.name, (model, p)


@pytest.mark.parametrize("outtype", ["bf16", "q8_0"])
def test_default_names_never_collide_and_sidecars_pair_by_name(checkpoint, tmp_path: Path, outtype: str) -> None:
    ck = checkpoint("qwen35")
    conv, ext = tmp_path / "convert", tmp_path / "extract"
    conv.mkdir()
    ext.mkdir()
    made: dict[str, Path] = {}
    for layout, args in CONVERT.items():  # one folder, no --force: a name taken twice fails here
        r = sub(["convert", ck, "--outtype", outtype, "-q", *args], cwd=conv)
        assert r.returncode == 0, (layout, r.stderr)
        new = {p for p in conv.glob("*.gguf")} - set(made.values())
        assert len(new) == 1, (layout, new)
        made[layout] = new.pop()
        assert inspect_file(made[layout]).layout.value == layout
    base = f"{ck.name}-{outtype.upper()}"
    assert made["bundled"].name == f"{base}.gguf"
    head = "" if outtype == "q8_0" else "-Q8_0"  # the head's type, shown where it is not the trunk's
    assert made["head-only"].name == f"{base}-MTP-head{head}.gguf"
    for layout, args in EXTRACT.items():
        r = sub(["extract", made["bundled"], "-q", *args], cwd=ext)
        assert r.returncode == 0, (layout, r.stderr)
    got = {inspect_file(p).layout.value: p for p in ext.glob("*.gguf")}
    assert sorted(got) == sorted(EXTRACT) and made["bundled"].name not in {p.name for p in got.values()}
    for layout, p in got.items():
        # a name is shared only by the same file: same layout, same tensors at the same types
        assert p.name == made[layout].name and _kind(p) == _kind(made[layout]), (layout, p.name)
    again = tmp_path / "from-sidecar"  # a head-only sidecar made from the self-contained one: named for the model
    again.mkdir()
    r = sub(["extract", made["mtp-only"], "--head-only", "-q"], cwd=again)
    assert r.returncode == 0, r.stderr
    (p,) = again.glob("*.gguf")
    assert p.name == made["head-only"].name and _kind(p) == _kind(made["head-only"])
    names = [p.name for p in made.values()]
    assert len(set(names)) == len(names)
    # each sidecar pairs with the trunk by name alone, and self-contained before head-only when both are there
    _pairs(made["trunk-only"], made["mtp-only"], HeadSource.SELF_CONTAINED)
    (conv / made["mtp-only"].name).unlink()
    _pairs(made["trunk-only"], made["head-only"], HeadSource.HEAD_ONLY)
    (ext / got["mtp-only"].name).unlink()
    _pairs(got["trunk-only"], got["head-only"], HeadSource.HEAD_ONLY)


def test_earlier_versions_names_still_pair(converted, tmp_path: Path) -> None:
    """Before: `convert --no-mtp` wrote <m>-Q8_0.gguf beside `--mtp`'s <m>-Q8_0-MTP.gguf; `extract --strip`
    wrote <m>-trunk.gguf beside `extract`'s <m>-MTP.gguf (and users name sidecars mtp-<m>.gguf, as llama.cpp's)."""
    trunk, side = converted("qwen35", "trunk-only"), converted("qwen35", "mtp-only")
    for model, sidecar in (("m-Q8_0.gguf", "m-Q8_0-MTP.gguf"), ("m-trunk.gguf", "m-MTP.gguf"),
                           ("m.gguf", "mtp-m.gguf"), ("m-trunk.gguf", "mtp-m-trunk.gguf")):
        d = tmp_path / model.removesuffix(".gguf") / sidecar.removesuffix(".gguf")
        d.mkdir(parents=True)
        shutil.copy(trunk, d / model)
        shutil.copy(side, d / sidecar)
        _pairs(d / model, d / sidecar, HeadSource.SELF_CONTAINED)


def test_sidecar_names_best_first() -> None:
    """layout.sidecar_names: the one rule pairing finds sidecars by (exact names, then the default names,
    self-contained before head-only, then any other sidecar-looking name); never another model or a non-GGUF."""
    from gguf_mtp.layout import sidecar_names

    folder = ["X-BF16.gguf", "zz-MTP.gguf", "X-BF16-MTP-head-Q8_0.gguf", "mtp-X-BF16.gguf", "X-BF16-MTP-Q8_0.gguf",
              "X-BF16-MTP.gguf", "notes-MTP.txt", "Y.gguf", "mtp-other.gguf"]
    assert sidecar_names("X-BF16", folder) == [
        "X-BF16-MTP.gguf", "mtp-X-BF16.gguf", "X-BF16-MTP-Q8_0.gguf", "X-BF16-MTP-head-Q8_0.gguf",
        "mtp-other.gguf", "zz-MTP.gguf"]
    # a trunk pairs with the sidecars named for the model it was made from, its own first
    assert sidecar_names("X-BF16-trunk", ["X-BF16-MTP-Q8_0.gguf", "X-BF16-trunk-MTP.gguf"]) == [
        "X-BF16-trunk-MTP.gguf", "X-BF16-MTP-Q8_0.gguf"]


def test_one_sidecar_rule(converted) -> None:
    """inspect (layout.detect), the head (surgery) and pairing (runtime) read a file's layout alike."""
    from gguf_mtp.ggufio.model import GGUFModel
    from gguf_mtp.head import find_head
    from gguf_mtp.layout import Layout

    for layout in ("bundled", "mtp-only", "head-only"):
        path = converted("qwen35", layout)
        head = find_head(GGUFModel(path))
        assert head is not None
        assert inspect_file(path).layout == (head.sidecar or Layout.BUNDLED) == Layout(layout)
