"""Where llama.cpp's sampler chains run (issue 28): inside the decode graph, or on the host from the logits
where a back-end cannot take them safely (Vulkan), and a Vulkan build that must neither die nor part from the
CPU's tokens when it samples.

The Vulkan tests run a second build of llama-cpp-python in subprocesses: ``GGUF_MTP_VK_VENV`` names its venv
(default ``.venv-vk``, what ``CMAKE_ARGS="-DGGML_VULKAN=on" VENV=.venv-vk bash scripts/setup.sh`` makes);
without ``VK_ICD_FILENAMES`` they run on Mesa's CPU driver lavapipe (``mesa-vulkan-drivers``). Without either
they are skipped, saying why. CI builds that venv after ``make test`` and runs this file again with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gguf_mtp
from gguf_mtp import backends as B
from gguf_mtp.runtime import MTPSession, SamplerConfig
from tests.reliability import cli

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny-qwen35-mtp"
PROMPTS = json.loads((TINY / "reference.json").read_text())["prompts"]
SEEDED = SamplerConfig(temp=0.9, seed=3)
ENV = "GGUF_MTP_DEVICE_SAMPLING"


def _dev(name: str, backend: str) -> B.Device:
    return B.Device(name, f"{name} model", "GPU", backend, 80 << 30, 79 << 30)


# --- the decision (no Vulkan needed) --------------------------------------------------------------------------

def test_which_back_ends_sample_on_the_host() -> None:
    vk, cuda, rpc = _dev("Vulkan0", "Vulkan"), _dev("CUDA0", "CUDA"), _dev("RPC0", "RPC")
    assert B.host_sampling_reason([]) is None  # nothing offloaded: the CPU samples in its graph
    assert B.host_sampling_reason([cuda, rpc]) is None
    why = B.host_sampling_reason([cuda, vk])
    assert why is not None and why.startswith("Vulkan0: ") and "CUDA0" not in why
    assert "docs/upstream/vulkan-reserve-after-decode.md" in why and "GGUF_MTP_DEVICE_SAMPLING=on" in why
    assert (ROOT / "docs" / "upstream" / "vulkan-reserve-after-decode.md").is_file()
    assert B.host_sampling_reason([vk], " Auto ") == why
    assert B.host_sampling_reason([vk], "on") is None  # for checking a llama.cpp that fixed it
    assert B.host_sampling_reason([], "off") == B.host_sampling_reason([cuda], "OFF") == "GGUF_MTP_DEVICE_SAMPLING=off"
    for bad in ("maybe", "1", "device"):
        with pytest.raises(ValueError, match="GGUF_MTP_DEVICE_SAMPLING=.*one of auto, off, on"):
            B.host_sampling_reason([vk], bad)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped trained model with an f32 trunk (Vulkan and the CPU then agree on every greedy token)."""
    out = tmp_path_factory.mktemp("vk") / "tiny-f32.gguf"
    return gguf_mtp.convert(TINY, outfile=out, outtype="f32", progress=False).path


def test_host_sampling_setting_routes_every_chain_and_says_so(tiny: Path, monkeypatch) -> None:
    """GGUF_MTP_DEVICE_SAMPLING=off: the target's and the head's chains run on the host (llama.cpp never sees
    them), one notice says so, and greedy and seeded tokens are those of the chains in the decode graph."""
    out = {}
    for setting in (None, "off"):
        if setting is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, setting)
        with MTPSession(tiny, mtp="auto", n_draft=3, n_ctx=512) as s:
            greedy = [s.generate(p, max_tokens=16).tokens for p in PROMPTS[:3]]
            seeded = s.generate(PROMPTS[0], max_tokens=16, sampling=SEEDED).tokens
            on_device = (s.engine.tsampler.on_device, s.engine.msampler.on_device)  # type: ignore[union-attr]
            notes = [n for n in s.notices if n.startswith("sampling on the host")]
        out[setting] = (greedy, seeded)
        if setting is None:
            assert on_device == (True, True) and not notes
        else:
            assert on_device == (False, False)
            assert notes == ["sampling on the host, not in the decode graph (GGUF_MTP_DEVICE_SAMPLING=off)"]
    assert out["off"] == out[None]


def test_a_bad_sampling_setting_is_a_one_line_error(tiny: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv(ENV, "sometimes")
    rc, err = cli(capsys, ["run", tiny, "-p", "def f(x):", "-n", "2", "--no-mtp"])
    assert rc == 2 and err.strip().splitlines()[-1] == (
        "error: GGUF_MTP_DEVICE_SAMPLING='sometimes': one of auto, off, on")


# --- a real Vulkan build --------------------------------------------------------------------------------------

def _vk_env() -> tuple[Path, dict[str, str]]:
    venv = Path(os.environ.get("GGUF_MTP_VK_VENV") or ROOT / ".venv-vk")
    lib = next(iter(venv.glob("lib/python*/site-packages/llama_cpp/lib/libggml-vulkan.so")), None)
    if not (venv / "bin" / "gguf-mtp").exists() or lib is None:
        pytest.skip(f"no Vulkan build of llama-cpp-python in {venv} (GGUF_MTP_VK_VENV names one; make it with "
                    f'CMAKE_ARGS="-DGGML_VULKAN=on" VENV={venv} bash scripts/setup.sh)')
    env = dict(os.environ)
    env.pop(ENV, None)  # the default routing is what is tested
    if not env.get("VK_ICD_FILENAMES") and not env.get("VK_DRIVER_FILES"):
        lvp = sorted(Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json"))
        if not lvp:
            pytest.skip("no Vulkan driver named (VK_ICD_FILENAMES) and no lavapipe "
                        "(apt-get install mesa-vulkan-drivers)")
        # ggml-vulkan skips CPU-type devices (lavapipe is one) unless they are named
        env.update(VK_ICD_FILENAMES=str(lvp[0]), VK_DRIVER_FILES=str(lvp[0]), GGML_VK_VISIBLE_DEVICES="0")
    return venv, env


def _vk_run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    tail = "\n".join(ln for ln in r.stderr.splitlines() if not ln.startswith(("llama_graph_n_input", "graph_res",
                                                                             "sched_res")))[-1500:]
    assert r.returncode >= 0, f"the Vulkan build died by signal {-r.returncode}:\n{tail}"
    assert r.returncode == 0, tail
    return r


@pytest.mark.parametrize("mode", ["plain", "fixed", "auto"])
def test_vulkan_run_completes_and_matches_the_cpu(tiny: Path, mode: str) -> None:
    """`gguf-mtp run -ngl 99` on Vulkan (the issue's crash: `-n 1 --no-mtp` aborted with a corrupted heap, `auto`
    segfaulted) prints the CPU's greedy text, and says that it samples on the host."""
    venv, env = _vk_env()
    extra = {"plain": ["--no-mtp"], "fixed": ["--spec-draft-n-max", "3"], "auto": ["--spec-draft-n-max", "auto"]}[mode]
    args = ["run", tiny, "-p", PROMPTS[3], "-n", "12", *extra]
    vk = _vk_run([venv / "bin" / "gguf-mtp", *args, "-ngl", "99"], env)
    assert "devices: Vulkan0" in vk.stderr, vk.stderr[-800:]
    assert "note: sampling on the host, not in the decode graph (Vulkan0: " in vk.stderr
    ref = subprocess.run([sys.executable, "-m", "gguf_mtp_cli.main", *map(str, args)], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert ref.returncode == 0, ref.stderr
    assert vk.stdout == ref.stdout


def test_vulkan_session_switching_samplers_matches_the_cpu(tiny: Path) -> None:
    """The API on Vulkan (the issue's SIGSEGV/SIGABRT with device_sampling=True): greedy, seeded, then greedy
    again in one session, each change of sampler a point where llama.cpp re-planned its graphs; greedy tokens
    equal the CPU's (seeded ones are only required to come: a draw may fall between two nearly equal
    probabilities that Vulkan and the CPU round apart)."""
    venv, env = _vk_env()
    script = (
        "import llama_cpp.llama_cpp, json, sys\n"
        "from gguf_mtp.runtime import MTPSession, SamplerConfig\n"
        "p = json.loads(sys.argv[2])\n"
        "with MTPSession(sys.argv[1], mtp=False, n_gpu_layers=99, n_ctx=512) as s:\n"
        "    a = [s.generate(x, max_tokens=8).tokens for x in p]\n"
        "    b = s.generate(p[0], max_tokens=8, sampling=SamplerConfig(temp=0.9, seed=3)).tokens\n"
        "    c = s.generate(p[1], max_tokens=8).tokens\n"
        "    print(json.dumps({'greedy': a, 'seeded': b, 'again': c, 'device': s.engine.tsampler.on_device}))\n")
    r = _vk_run([venv / "bin" / "python", "-c", script, tiny, json.dumps(PROMPTS[:2])], env)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    with MTPSession(tiny, mtp=False, n_ctx=512) as s:
        want = [s.generate(x, max_tokens=8).tokens for x in PROMPTS[:2]]
    assert got["greedy"] == want and got["again"] == want[1]
    assert 0 < len(got["seeded"]) <= 8 and got["device"] is False


def test_vulkan_embeddings_on_the_device_and_batched_inputs_match_the_cpu(tiny: Path) -> None:
    """With every layer offloaded the token embedding goes to Vulkan0 (placement.place_embeddings; llama.cpp keeps
    it on the CPU), and where the build carries patch 0008 each decode's inputs are copied as one batch (ggml-vulkan's
    asynchronous copies): the session's placement says so, and the greedy tokens, plain and with the head, equal the
    CPU's, as they do with both switched off (GGUF_MTP_EMBD_ON_DEVICE=0, GGML_SCHED_ASYNC_INPUTS=0) and with the
    copies waited for after each split's launch (GGML_SCHED_ASYNC_INPUTS=2: an event recorded behind them, which
    ggml-vulkan has; the scheduler's debug line says it took that path, and only then)."""
    venv, env = _vk_env()
    script = (
        "import llama_cpp.llama_cpp, json, sys\n"
        "from gguf_mtp.runtime import MTPSession, patches\n"
        "p = json.loads(sys.argv[2])\n"
        "out = {}\n"
        "for mtp in (False, 'auto'):\n"
        "    with MTPSession(sys.argv[1], mtp=mtp, n_draft=3, n_gpu_layers=99, n_ctx=512) as s:\n"
        "        out[str(mtp)] = [[s.generate(x, max_tokens=12).tokens for x in p], s.placement['target']]\n"
        "print(json.dumps({'runs': out, 'patched': 'sched-async-inputs' in patches.names()}))\n")
    runs = {}
    after = {}  # whether llama.cpp's log (raw: its own, to stderr) says a split's copies were waited for after
    for embd, inputs in (("1", "1"), ("1", "2"), ("0", "0")):
        r = _vk_run([venv / "bin" / "python", "-c", script, tiny, json.dumps(PROMPTS[:3])],
                    env | {"GGUF_MTP_EMBD_ON_DEVICE": embd, "GGML_SCHED_ASYNC_INPUTS": inputs,
                           "GGUF_MTP_LLAMA_LOG": "raw"})
        runs[embd, inputs] = json.loads(r.stdout.strip().splitlines()[-1])
        after[embd, inputs] = "Vulkan0: a split's input copies are waited for after its launch" in r.stderr
    with MTPSession(tiny, mtp=False, n_ctx=512) as s:
        want = [s.generate(x, max_tokens=12).tokens for x in PROMPTS[:3]]
    for (embd, inputs), got in runs.items():
        assert set(got["runs"]) == {"False", "auto"}
        for mtp, (toks, where) in got["runs"].items():
            assert toks == want, (embd, inputs, mtp, got["patched"])
            assert where.endswith(", token embeddings on Vulkan0") == (embd == "1"), (embd, where)
        assert after[embd, inputs] == (inputs == "2" and got["patched"]), (embd, inputs, got["patched"])
