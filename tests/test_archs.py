"""The arch table (gguf_mtp.archs) and the family registry read from it: names llama.cpp knows, one loadable
family per HF architecture, and lookups that load neither numpy nor families they do not need."""

from __future__ import annotations

import json
import subprocess
import sys

import gguf
import pytest

from gguf_mtp import archs
from gguf_mtp.families import REGISTRY, load
from gguf_mtp.families.base import Family

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it


def test_arch_names_are_gguf_pys() -> None:
    # the table spells them as strings (gguf-py loads numpy); they must be gguf-py's names
    assert set(archs.ARCHS) <= set(gguf.MODEL_ARCH_NAMES.values())


def test_registry_loads_each_family_with_its_row() -> None:
    assert set(REGISTRY) == set(archs.HF_FAMILIES)
    for hf, where in REGISTRY.items():
        cls = load(where)
        assert issubclass(cls, Family), where
        row = archs.ARCHS[cls.arch]
        assert row.families[hf] == where
        assert (cls.max_heads, cls.norm_offset) == (row.max_heads, row.norm_offset)
        assert cls.tokenizer_pre  # from the row unless the family refines it


def _imported_after(code: str) -> list[str]:
    script = "import sys, json\n" + code + "\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_table_lookups_load_no_converter() -> None:
    mods = _imported_after("from gguf_mtp.archs import mtp_archs, arch\nassert 'qwen35' in mtp_archs()\n"
                           "assert arch('qwen3next').recurrent")
    assert "numpy" not in mods
    assert not any(m.startswith("gguf_mtp.families") for m in mods)


def test_family_lookup_imports_that_family_only() -> None:
    mods = _imported_after("from gguf_mtp.families import family_class\n"
                           "family_class({'architectures': ['Glm4MoeForCausalLM']})")
    families = {m for m in mods if m.startswith("gguf_mtp.families.")}
    assert "gguf_mtp.families.glm4moe" in families
    assert not families & {"gguf_mtp.families.qwen35", "gguf_mtp.families.mimo2", "gguf_mtp.families.step35"}


def test_each_arch_has_a_synthetic_checkpoint() -> None:
    # the shared tests write one per arch of the table (conftest); a family named like an arch converts to it
    from tests.synthetic import WRITERS, SyntheticSpec

    assert set(archs.ARCHS) <= set(WRITERS)
    for family, writer in WRITERS.items():
        hf = writer.config(SyntheticSpec(family), 1000)["architectures"][0]
        arch = load(REGISTRY[hf]).arch
        assert arch == family or family not in archs.ARCHS, (family, arch)
