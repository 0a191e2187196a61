"""Device placement and llama.cpp's RPC backend: option parsing and checks, the head's layers placed on their
own device, and an RPC round trip on loopback (ggml's RPC servers in subprocesses; the client runs in a
subprocess too, since RPC devices stay in ggml's registry for the life of a process)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gguf_mtp.errors import GgufMtpError
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.backends import Device
from gguf_mtp.runtime import patches, placement, rpc
from gguf_mtp_cli import device_options
from gguf_mtp_cli.main import main

from .lossless import margin_over_tolerance

ORACLE = {"oracle_head": True, "trunk_scale": 0.5}
PROMPT = "The quick brown fox jumps over the lazy dog and the weather is "
ROOT = Path(__file__).resolve().parent.parent


def test_option_parsing() -> None:
    assert device_options.device_list("CUDA0,CUDA1") == ["CUDA0", "CUDA1"]
    assert device_options.device_list("none") == []
    for bad in ("", "CUDA0,", "none,CUDA0"):
        with pytest.raises(GgufMtpError, match="--device"):
            device_options.device_list(bad)
    assert device_options.tensor_split("3,1") == [3.0, 1.0] and device_options.tensor_split("1/2/0") == [1.0, 2.0, 0.0]
    for bad, why in (("a,1", "not a number"), ("-1,2", ">= 0"), ("0,0", "above 0"), ("nan", "finite")):
        with pytest.raises(GgufMtpError, match=why):
            device_options.tensor_split(bad)
    assert device_options.endpoints("10.0.0.2:50052,gpu-box:1") == [("10.0.0.2", 50052), ("gpu-box", 1)]
    for bad in ("10.0.0.2", "host:0", "host:70000", "a b:1", "[::1]:50052"):
        with pytest.raises(GgufMtpError, match="not host:port"):
            device_options.endpoints(bad)
    with pytest.raises(GgufMtpError, match="--split-mode"):
        placement.Placement(split_mode="rows")


def test_option_strings_are_read_without_llama_cpp() -> None:
    """The CLI reads --device, --tensor-split and --rpc before anything loads llama.cpp (or the runtime)."""
    code = ("import sys; sys.modules['llama_cpp'] = None\n"
            "from gguf_mtp_cli.device_options import device_list, endpoints, tensor_split\n"
            "print(device_list('RPC0,CUDA0'), tensor_split('3/1'), endpoints('h:1'),"
            " sorted(m for m in sys.modules if m.startswith('gguf_mtp.runtime')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['RPC0', 'CUDA0'] [3.0, 1.0] [('h', 1)] []"


def _layer_devices(order: list[Device], split: list[float], ngl: int, n_layer_all: int) -> list[str]:
    """llama.cpp's get_layer_buft_list, re-stated: the device of each layer and of the output layer (float32
    arithmetic as there)."""
    import numpy as np

    f32 = np.float32
    cum, s = [], f32(0)
    for x in split:
        s = f32(s + f32(x))
        cum.append(s)
    cum = [f32(c / s) for c in cum]
    start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    out = []
    for il in range(n_layer_all + 1):
        if il < start:
            out.append("CPU")
            continue
        v = f32(f32(il - start) / f32(act))
        out.append(order[next((i for i, c in enumerate(cum) if c > v), len(cum) - 1)].name)
    return out


@pytest.mark.parametrize("n_layer_all,n_mtp,ngl,split", [
    (33, 1, 99, None), (33, 1, 99, [3.0, 1.0]), (65, 3, 99, None), (33, 1, 10, None), (33, 1, 0, None), (33, 1, -1, None),
    (49, 1, 99, [1.0, 0.0]), (97, 1, 99, [7.0, 5.0]),
])
def test_draft_split_puts_the_head_and_the_lm_head_on_the_draft_device(n_layer_all, n_mtp, ngl, split) -> None:
    gib = 1 << 30
    a, b, c = (Device(n, "", "GPU", "X", total=80 * gib, free=free, ptr=ptr) for n, free, ptr in
               (("CUDA0", 70 * gib, 1), ("CUDA1", 30 * gib, 2), ("CUDA2", 80 * gib, 3)))
    order, tsplit, ngl2 = placement.draft_split([a, b], c, split, ngl, n_layer_all, n_mtp)
    where = _layer_devices(order, tsplit, ngl2, n_layer_all)
    n_trunk = n_layer_all - n_mtp
    assert where[n_trunk:] == ["CUDA2"] * (n_mtp + 1)  # MTP blocks and the output layer
    assert "CUDA2" not in where[:n_trunk]
    trunk_gpu = [w for w in where[:n_trunk] if w != "CPU"]
    assert len(trunk_gpu) == max(0, min(ngl if ngl >= 0 else 999, n_layer_all + 1) - n_mtp - 1)
    if split == [1.0, 0.0]:
        assert set(trunk_gpu) == {"CUDA0"}
    elif ngl < 0 or ngl >= n_layer_all + 1:  # the trunk shares follow the proportions (default: free memory, 7:3)
        w = split or [7.0, 3.0]
        assert abs(trunk_gpu.count("CUDA0") / len(trunk_gpu) - w[0] / sum(w)) <= 1 / len(trunk_gpu) + 1e-9
    # the draft device also among the trunk's: it keeps its trunk share, then the head
    order, tsplit, ngl2 = placement.draft_split([a, b], b, split, ngl, n_layer_all, n_mtp)
    where = _layer_devices(order, tsplit, ngl2, n_layer_all)
    assert [d.name for d in order] == ["CUDA0", "CUDA1"] and where[n_trunk:] == ["CUDA1"] * (n_mtp + 1)
    # the trunk on the CPU (--device none), the head offloaded alone
    order, tsplit, ngl2 = placement.draft_split([], c, None, ngl, n_layer_all, n_mtp)
    assert _layer_devices(order, tsplit, ngl2, n_layer_all) == ["CPU"] * n_trunk + ["CUDA2"] * (n_mtp + 1)


@pytest.mark.parametrize("ngl,split", [(99, None), (33, None), (32, None), (-1, None), (10, None), (99, [0.0, 1.0]),
                                       (99, [1.0]), (99, [2.0, 5.0]), (33, [0.0, 3.0])])
def test_the_embedding_goes_where_layer_zero_goes(ngl, split) -> None:
    """layer_zero_device against the layer-by-layer rule above (llama.cpp's ``load_tensors``): the device of
    layer 0, or None where layer 0 stays on the CPU (then so does the token embedding, as llama.cpp keeps it)."""
    gib = 1 << 30
    a, b = (Device(n, "", "GPU", "CUDA", total=80 * gib, free=free, ptr=ptr) for n, free, ptr in
            (("CUDA0", 70 * gib, 1), ("CUDA1", 30 * gib, 2)))
    n_layer_all = 32
    want = _layer_devices([a, b], split or [70.0, 30.0], ngl if ngl >= 0 else 999, n_layer_all)[0]
    got = placement.layer_zero_device([a, b], ngl, n_layer_all, tensor_split=split)
    assert (got.name if got else "CPU") == want
    assert placement.layer_zero_device([], 99, n_layer_all) is None  # nothing offloaded (--device none)
    none_mode = placement.SPLIT_MODES["none"]
    assert placement.layer_zero_device([a, b], 99, n_layer_all, split_mode=none_mode, main_gpu=1) is b
    assert placement.layer_zero_device([a, b], 10, n_layer_all, split_mode=none_mode) is None


def test_the_embedding_moves_only_beside_room_to_spare() -> None:
    """embeddings_fit: the device's share of the weights, the embedding and a reserve (1 GiB or a tenth of the
    device, the larger) must fit its free memory."""
    gib = 1 << 30
    dev = Device("CUDA0", "", "GPU", "CUDA", total=24 * gib, free=12 * gib)
    assert placement.embeddings_fit(dev, 1.0, 9 * gib, 1 * gib)  # 8 + 1 + 2.4 <= 12
    assert not placement.embeddings_fit(dev, 1.0, 10 * gib, 1 * gib)  # 9 + 1 + 2.4 > 12
    assert placement.embeddings_fit(dev, 0.5, 18 * gib, 1 * gib)  # half of 17, then 1 + 2.4
    small = Device("CUDA0", "", "GPU", "CUDA", total=4 * gib, free=2 * gib)
    assert not placement.embeddings_fit(small, 1.0, int(1.1 * gib), gib // 2)  # 0.6 + 0.5 + 1 (the floor) > 2


def test_the_embedding_override_reaches_llama_cpp(converted, capfd, monkeypatch) -> None:
    """The override ModelParams hands llama.cpp (a tensor_buft_overrides array: the embedding's exact name, a
    device's buffer type, then the terminator) is the one its loader applies. Run with the CPU's own buffer type,
    the one device every build has; the GPU case is the same array with the GPU's type (tests/test_vulkan.py runs
    it on Vulkan; docs/benchmarks.md measures it on CUDA)."""
    from gguf_mtp.runtime import llama

    path = converted("qwen35", "bundled", **ORACLE)
    reg = llama.registry()
    cpu = reg.by_name("CPU")
    assert cpu is not None and reg.buffer_type(cpu)
    t = GGUFModel(path).tensors["token_embd.weight"].info
    assert reg.supports_get_rows(cpu, t.ggml_type, t.shape[0], t.shape[1])
    monkeypatch.setattr(llama, "VERBOSE", True)  # every log line of the load to stderr, not only the last 200
    moved = re.compile(r"tensor (\S+) \(.*\) buffer type overridden to CPU")
    for embed in (False, True):
        mp = placement.ModelParams(placement.Placement(devices=[]))
        if embed:
            mp.embed_on(cpu, reg.buffer_type(cpu))
            assert mp.describe() == "CPU only, token embeddings on CPU"
        capfd.readouterr()
        llama.Model(path, placement=mp).close()
        assert moved.findall(capfd.readouterr().err) == (["token_embd.weight"] if embed else [])


def test_a_load_that_fails_with_the_embedding_moved_is_tried_once_more_without(converted) -> None:
    """The embedding's room is an estimate made before the load: a load that fails with it moved is repeated with
    llama.cpp's placement (the placement entry and a notice say so); one that fails without it is not repeated."""
    from gguf_mtp.runtime import llama
    from gguf_mtp.runtime.session import MTPSession

    path = converted("qwen35", "bundled", **ORACLE)
    reg = llama.registry()
    cpu = reg.by_name("CPU")
    assert cpu is not None
    calls: list[str | None] = []

    def load(mp: placement.ModelParams) -> llama.Model:
        calls.append(mp.embd_device.name if mp.embd_device else None)
        if mp.embd_device is not None or len(calls) > 2:
            raise GgufMtpError(f"{path}: llama.cpp could not load the model: out of device memory")
        return llama.Model(path, placement=mp)

    with MTPSession(path, mtp=False, n_ctx=128) as s:
        mp = placement.ModelParams(placement.Placement(devices=[]))
        mp.embed_on(cpu, reg.buffer_type(cpu))
        s.placement["target"] = mp.describe()
        s._load_placed("target", mp, load).close()
        assert calls == ["CPU", None] and s.placement["target"] == "CPU only"
        assert s.notices[-1] == (f"the token embedding stays on the CPU: the load with it on CPU failed ({path}: "
                                 "llama.cpp could not load the model: out of device memory); GGUF_MTP_EMBD_ON_DEVICE=0 "
                                 "skips the attempt")
        with pytest.raises(GgufMtpError, match="out of device memory"):
            s._load_placed("target", mp, load)  # nothing moved now: the error as it is
        assert calls == ["CPU", None, None]


def test_device_and_split_errors(converted, capsys) -> None:
    model = str(converted("qwen35", "bundled", **ORACLE))
    cases = [
        (["--device", "CUDA7"], "--device CUDA7: the device does not exist"),
        (["--device", "CPU"], "--device CPU: the device is the CPU"),
        (["--device-draft", "NoSuchGPU"], "--device-draft NoSuchGPU: the device does not exist"),
        (["--device", "none", "--tensor-split", "1,1,1"], "--tensor-split has 3 proportions but the model is placed on 0"),
        (["--tensor-split", "1,x"], "'x' is not a number"),
        (["--split-mode", "rows"], "--split-mode 'rows'"),
        (["--rpc", "nohostport"], "is not host:port"),
    ]
    for args, want in cases:
        assert main(["run", model, "-p", "hi", "-n", "2", *args]) == 2, args
        err = capsys.readouterr().err
        assert want in err and "Traceback" not in err, (args, err)
        assert err.strip().splitlines()[-1].startswith("error:"), err
    pytest.importorskip("uvicorn")  # serve takes the same options
    assert main(["serve", model, "--port", "0", "--device", "CUDA7"]) == 2
    err = capsys.readouterr().err
    assert "--device CUDA7: the device does not exist" in err and err.strip().splitlines()[-1].startswith("error:"), err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _need_rpc() -> None:
    import llama_cpp

    if not llama_cpp.llama_supports_rpc():
        pytest.skip("this llama-cpp-python build has no RPC backend (scripts/setup.sh builds it with -DGGML_RPC=ON)")


def test_unreachable_and_silent_rpc_servers_fail_fast(capsys) -> None:
    port = _free_port()  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(GgufMtpError, match=f"--rpc 127.0.0.1:{port}: cannot connect"):
        rpc.probe("127.0.0.1", port)
    assert time.monotonic() - t0 < 5
    # a peer that accepts and never answers (a wrong port, a busy server): bounded by the probe's timeout
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    conns: list[socket.socket] = []
    th = threading.Thread(target=lambda: conns.append(srv.accept()[0]), daemon=True)
    th.start()
    t0 = time.monotonic()
    with pytest.raises(GgufMtpError, match="no answer within 0.5 s"):
        rpc.probe("127.0.0.1", srv.getsockname()[1], timeout=0.5)
    assert time.monotonic() - t0 < 3
    srv.close()
    for c in conns:
        c.close()
    _need_rpc()  # the CLI, up to the point where ggml would take the server
    t0 = time.monotonic()
    assert main(["run", "--list-devices", "--rpc", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"--rpc 127.0.0.1:{port}: cannot connect" in err and "rpc-server" in err, err
    assert err.strip().startswith("error:") and time.monotonic() - t0 < 5


# -- RPC round trip -------------------------------------------------------------------------------
def _cli(*args: str, timeout: float = 240, log: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("GGUF_MTP_LLAMA_LOG", None)
    if log:
        env["GGUF_MTP_LLAMA_LOG"] = "1"
    return subprocess.run([sys.executable, "-m", "gguf_mtp_cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def _start_rpc_server(port: int) -> subprocess.Popen:
    """`gguf-mtp rpc-server` (one CPU thread) on a loopback port, once it answers ggml's HELLO."""
    p = subprocess.Popen([sys.executable, "-m", "gguf_mtp_cli.main", "rpc-server", "--port", str(port),
                          "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    deadline = time.monotonic() + 60
    while True:
        try:
            rpc.probe("127.0.0.1", port, timeout=2)
            return p
        except GgufMtpError:
            if p.poll() is not None or time.monotonic() > deadline:
                p.kill()
                pytest.fail(f"rpc-server on {port} did not start: {p.communicate()[0]}")
            time.sleep(0.2)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


@pytest.fixture(scope="module")
def rpc_servers():
    """Two ggml RPC servers (`gguf-mtp rpc-server`, one CPU thread each) on loopback ports."""
    _need_rpc()
    procs: list[subprocess.Popen] = []
    try:
        eps = []
        for _ in range(2):
            port = _free_port()
            procs.append(_start_rpc_server(port))
            eps.append(f"127.0.0.1:{port}")
        yield eps
    finally:
        _stop(procs)


def _generate(model: Path, *args: str, log: bool = False) -> tuple[str, dict, str]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        stats = Path(d) / "stats.json"
        r = _cli("run", str(model), "-p", PROMPT, "-n", "32", "--spec-draft-n-max", "3", "-t", "1",
                 "--stats-json", str(stats), *args, log=log)
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout, json.loads(stats.read_text()), r.stderr


def _buffer_mib(log: str, endpoint: str) -> float:
    """MiB of model weights llama.cpp put on the server at ``endpoint`` (its buffers are RPC<i>[host:port])."""
    m = re.findall(rf"RPC\d+\[{re.escape(endpoint)}\] model buffer size =\s*([0-9.]+) MiB", log)
    assert m, f"no model buffer on {endpoint} in the log"
    return sum(float(x) for x in m)


@pytest.fixture(scope="module")
def tie_free(converted) -> dict:
    """ORACLE with the first seed whose plain greedy path for PROMPT has no pick the tie rule would excuse
    (tests/lossless.py, margin_over_tolerance): these tests compare the CLI's texts exactly, between a verify's
    rows and a plain step's one row, and between the local CPU back-end and an RPC server's (which never repacks
    weights, as the local one does on some CPUs), each rounding differently."""
    from gguf_mtp.runtime import MTPSession

    seen = []
    for seed in range(16):
        spec = {**ORACLE, "seed": seed}
        model = converted("qwen35", "bundled", **spec)
        ratio, at = margin_over_tolerance(lambda m=model: MTPSession(m, mtp=False, n_ctx=512),
                                          lambda s: s.generate(PROMPT, max_tokens=32))
        if ratio > 1:
            return spec
        seen.append(f"seed {seed}: {ratio:.2f} at pick {at}")
    pytest.fail(f"no seed without a near-tie on PROMPT's greedy path: {seen}")


def test_rpc_round_trip_gives_the_local_text(converted, rpc_servers, tie_free) -> None:
    bundled = converted("qwen35", "bundled", **tie_free)
    local, st, _ = _generate(bundled)
    assert st["drafted"] > 0 and 0 < st["accepted"] < st["drafted"]
    plain, _, _ = _generate(bundled, "--no-mtp")
    assert local == plain
    # every layer on one RPC server
    out, st, err = _generate(bundled, "-ngl", "99", "--rpc", rpc_servers[0], log=True)
    assert out == local and st["drafted"] > 0
    # patch 0010's path too, where loaded: the embedding on the CPU, its device ids' rows looked up from the server
    assert ("last draft verified from the device" in err) == patches.device_tokens(), err[-2000:]
    assert st["placement"]["target"].startswith("RPC0, -ngl 99") and _buffer_mib(err, rpc_servers[0]) > 0
    # the trunk split over both servers by layer
    out, st, err = _generate(bundled, "-ngl", "99", "--rpc", ",".join(rpc_servers), "--tensor-split", "1,1", log=True)
    assert out == local and _buffer_mib(err, rpc_servers[0]) > 0 and _buffer_mib(err, rpc_servers[1]) > 0


def test_the_head_on_its_own_rpc_device(converted, rpc_servers, tie_free) -> None:
    """--device RPC0 --device-draft RPC1: the trunk's layers on one server, the MTP block and the LM head on the
    other (bundled and head-only: by the model's layer split; self-contained: the sidecar's own model)."""
    spec = tie_free
    bundled = converted("qwen35", "bundled", **spec)
    local, _, _ = _generate(bundled)
    rpc_args = ["-ngl", "99", "--rpc", ",".join(rpc_servers), "--device", "RPC0", "--device-draft", "RPC1"]
    out, st, err = _generate(bundled, *rpc_args, log=True)
    assert out == local and st["drafted"] > 0 and st["accepted"] > 0
    assert st["placement"]["draft"].startswith("RPC1 (blk.4 and the LM head")
    m = GGUFModel(bundled)
    head = sum(t.info.nbytes for n, t in m.tensors.items() if n.startswith("blk.4.") or n.startswith("output"))
    trunk = sum(t.info.nbytes for n, t in m.tensors.items() if re.match(r"blk\.[0-3]\.", n))
    assert abs(_buffer_mib(err, rpc_servers[1]) - head / 2**20) < 0.05 * head / 2**20 + 0.02
    assert abs(_buffer_mib(err, rpc_servers[0]) - trunk / 2**20) < 0.05 * trunk / 2**20 + 0.02
    trunk_only = converted("qwen35", "trunk-only", **spec)
    for layout in ("head-only", "mtp-only"):
        side = converted("qwen35", layout, **spec)
        out, st, err = _generate(trunk_only, "--mtp", str(side), *rpc_args, log=True)
        assert out == local and st["drafted"] > 0, layout
        assert _buffer_mib(err, rpc_servers[1]) > 0
        if layout == "mtp-only":  # a model of its own, placed by its own parameters
            assert st["placement"]["draft"].startswith("RPC1, -ngl 99")
    # --device-draft alone: the sidecar goes there whole, the target stays where -ngl (0) leaves it
    side = converted("qwen35", "mtp-only", **spec)
    out, st, _ = _generate(trunk_only, "--mtp", str(side), "--rpc", rpc_servers[1], "--device-draft", "RPC0")
    assert out == local and st["placement"]["target"] == "CPU only"
    assert st["placement"]["draft"].startswith("RPC0, -ngl 999")
    # --split-mode none: the trunk on --main-gpu; an index past the list is named
    out, _, _ = _generate(bundled, "-ngl", "99", "--rpc", ",".join(rpc_servers), "--split-mode", "none",
                          "--main-gpu", "1", "--device-draft", "RPC0")
    assert out == local
    r = _cli("run", str(bundled), "-p", "hi", "-n", "2", "-ngl", "99", "--rpc", rpc_servers[0],
             "--split-mode", "none", "--main-gpu", "2")
    assert r.returncode == 2 and "--main-gpu 2: only 1 device(s) (RPC0)" in r.stderr, r.stderr[-2000:]


def test_list_devices_shows_rpc_servers(rpc_servers) -> None:
    r = _cli("run", "--list-devices", "--rpc", rpc_servers[0])
    assert r.returncode == 0, r.stderr
    assert f"RPC0: {rpc_servers[0]}" in r.stdout and "CPU:" in r.stdout


def test_rpc_server_errors(rpc_servers) -> None:
    port = rpc_servers[0].split(":")[1]
    r = _cli("rpc-server", "--port", port, timeout=60)
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr[-1000:]
    r = _cli("rpc-server", "--device", "CUDA9", timeout=60)
    assert r.returncode == 2 and "--device CUDA9: no such device" in r.stderr, r.stderr[-1000:]


# -- RPC servers that break after the handshake --------------------------------------------------------------
# ggml's RPC client aborts the process when a server breaks; the run ends with one line naming the server and
# exit status 2 instead (gguf_mtp/runtime/rpc_abort.py). Each case fails with SIGABRT without it.
_HELLO, _SET_TENSOR = 14, 6  # ggml-rpc.cpp's enum rpc_cmd


def _recv_exact(c: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = c.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class _FakeRpcServer:
    """Answers ggml's HELLO on loopback as an RPC server does, then breaks on the next command: ``close`` drops
    the connection, ``garbage`` answers bytes that are no reply and keeps the connection open."""

    def __init__(self, mode: str) -> None:
        self.mode, self.sock = mode, socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(240)
        self.port = self.sock.getsockname()[1]
        self.open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        for _ in range(16):  # the probe, ggml's connection, the client's checks while it aborts
            try:
                c = self.sock.accept()[0]
            except OSError:
                return
            self.open.append(c)
            c.settimeout(240)
            try:
                while (head := _recv_exact(c, 9)) is not None:
                    cmd, size = struct.unpack("<BQ", head)
                    if size > 1 << 20 or _recv_exact(c, size) is None:
                        break
                    if cmd == _HELLO:  # protocol 7.0.0, no transport capabilities
                        c.sendall(struct.pack("<Q", 28) + bytes([rpc.PROTOCOL_MAJOR, rpc.PROTOCOL_MINOR, 0, 0]) + bytes(24))
                    elif self.mode == "garbage":
                        c.sendall(b"\xff" * 64)
                    else:
                        break
            except OSError:
                pass
            if self.mode != "garbage":
                c.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.open:
            c.close()


class _CuttingProxy:
    """Forwards a client's connections to the RPC server ``server`` (a process) on ``port`` and, when the
    client sends command ``cmd`` the ``nth`` time, kills the server (SIGKILL) and stops listening: a server that
    dies at a chosen point of the protocol, e.g. mid-load."""

    def __init__(self, server: subprocess.Popen, port: int, cmd: int, nth: int = 1) -> None:
        self.server, self.target, self.cmd, self.left = server, port, cmd, nth
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(240)
        self.port = self.sock.getsockname()[1]
        self.cut = threading.Event()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        for _ in range(1000):  # ggml opens a connection for each registry query (device memory, alignment, ...)
            try:
                c = self.sock.accept()[0]
            except OSError:
                return
            self.connections += 1
            up = socket.create_connection(("127.0.0.1", self.target), timeout=240)
            threading.Thread(target=self._pump, args=(up, c), daemon=True).start()
            threading.Thread(target=self._requests, args=(c, up), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        _hang_up(src, dst)

    def _requests(self, client: socket.socket, up: socket.socket) -> None:
        try:
            while (head := _recv_exact(client, 9)) is not None:
                cmd, size = struct.unpack("<BQ", head)
                if cmd == self.cmd:
                    self.left -= 1
                    if self.left == 0:
                        self.cut.set()
                        _hang_up(self.sock)  # new connections are refused, as by a server that is gone
                        self.server.kill()
                        self.server.wait(30)
                        break
                up.sendall(head)
                while size:
                    chunk = client.recv(min(size, 1 << 20))
                    if not chunk:
                        raise OSError("client gone")
                    up.sendall(chunk)
                    size -= len(chunk)
        except OSError:
            pass
        _hang_up(client, up)


def _hang_up(*socks: socket.socket) -> None:
    """Close both ends for real: close() alone leaves a connection open while another thread reads it."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def _ended_with_one_line(r: subprocess.CompletedProcess | tuple[int, str], endpoint: str) -> str:
    """The process ended with exit status 2 (not a signal) and ``error: --rpc ENDPOINT: ...`` as its last line,
    with no traceback and no backtrace; that line."""
    rc, err = (r.returncode, r.stderr) if isinstance(r, subprocess.CompletedProcess) else r
    assert rc == 2, (rc, err[-3000:])
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: --rpc {endpoint}: "), err[-3000:]
    assert "Traceback" not in err and "LWP" not in err and "GGML_ASSERT" not in err, err[-3000:]
    return last


def test_a_server_that_breaks_after_the_handshake_is_named(converted, rpc_servers) -> None:
    """A peer that answers HELLO, then drops the connection (named among two servers) or answers garbage."""
    model = converted("qwen35", "bundled", **ORACLE)
    fake = _FakeRpcServer("close")
    try:
        r = _cli("run", str(model), "-p", "hi", "-n", "4", "-ngl", "99",
                 "--rpc", f"{rpc_servers[0]},127.0.0.1:{fake.port}", timeout=180)
    finally:
        fake.close()
    last = _ended_with_one_line(r, f"127.0.0.1:{fake.port}")
    assert "closed the connection" in last and rpc_servers[0] not in last, last
    fake = _FakeRpcServer("garbage")
    try:
        r = _cli("run", str(model), "-p", "hi", "-n", "4", "--rpc", f"127.0.0.1:{fake.port}", timeout=180)
    finally:
        fake.close()
    _ended_with_one_line(r, f"127.0.0.1:{fake.port}")


def test_a_server_that_dies_mid_load_is_named(converted) -> None:
    _need_rpc()
    model = converted("qwen35", "bundled", **ORACLE)
    port = _free_port()
    server = _start_rpc_server(port)
    proxy = _CuttingProxy(server, port, _SET_TENSOR)  # the first tensor the model load sends
    try:
        r = _cli("run", str(model), "-p", "hi", "-n", "4", "-ngl", "99", "--rpc", f"127.0.0.1:{proxy.port}",
                 timeout=180)
    finally:
        _stop([server])
    assert proxy.cut.is_set()
    last = _ended_with_one_line(r, f"127.0.0.1:{proxy.port}")
    assert any(w in last for w in ("closed the connection", "went away", "could not be reached")), last


def test_an_abort_message_names_whole_endpoints() -> None:
    from gguf_mtp.runtime.rpc_abort import named_in

    eps = ["127.0.0.1:5005", "127.0.0.1:50052", "0.0.1:50052", "gpu-box:1"]
    assert named_in("ggml-rpc.cpp:547: Failed to connect to 127.0.0.1:50052\n", eps) == ["127.0.0.1:50052"]
    assert named_in("Failed to connect to gpu-box:1", eps) == ["gpu-box:1"]
    assert named_in("Failed to connect to my-gpu-box:10", eps) == []


def _kill_server_under(client: subprocess.Popen, server: subprocess.Popen, started: Callable[[], bool]) -> None:
    """Once ``started()`` (the client's answer streams), kill ``server`` while ``client`` is frozen, then let the
    client go on: it is surely mid-generation when it finds the server gone, however slow this machine is."""
    assert started()
    client.send_signal(signal.SIGSTOP)
    try:
        server.kill()
        server.wait(30)
    finally:
        client.send_signal(signal.SIGCONT)


def test_a_server_killed_mid_generation_ends_run_with_one_line(converted) -> None:
    """The rpc-server process killed while `run` streams its answer."""
    _need_rpc()
    model = converted("qwen35", "bundled", **ORACLE)
    port = _free_port()
    ep = f"127.0.0.1:{port}"
    server = _start_rpc_server(port)
    env = {k: v for k, v in os.environ.items() if k != "GGUF_MTP_LLAMA_LOG"}
    run = subprocess.Popen([sys.executable, "-m", "gguf_mtp_cli.main", "run", str(model), "-p", PROMPT,
                            "-n", "4000", "-ngl", "99", "--rpc", ep, "-t", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        assert run.stdout is not None
        first = run.stdout.read(8)  # the answer streams: generation is under way, thousands of tokens to go
        _kill_server_under(run, server, lambda: len(first) == 8)
        out, err = run.communicate(timeout=180)
    finally:
        _stop([run, server])
    last = _ended_with_one_line((run.returncode, err.decode()), ep)
    assert "went away" in last or "closed the connection" in last or "reset" in last, last


def test_a_server_killed_mid_generation_ends_serve_with_one_line(converted) -> None:
    """The rpc-server process killed while `serve` streams an answer: the server cannot go on either; it ends with
    the same line rather than a signal."""
    _need_rpc()
    pytest.importorskip("uvicorn")
    model = converted("qwen35", "bundled", **ORACLE)
    port = _free_port()
    ep = f"127.0.0.1:{port}"
    server = _start_rpc_server(port)
    env = {k: v for k, v in os.environ.items() if k != "GGUF_MTP_LLAMA_LOG"}
    serve = subprocess.Popen([sys.executable, "-m", "gguf_mtp_cli.main", "serve", str(model), "--port", "0", "-t", "1",
                              "-ngl", "99", "--rpc", ep], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=ROOT)
    log: list[str] = []
    try:
        assert serve.stderr is not None
        http_port = 0
        for line in serve.stderr:  # bounded: the server prints its address or ends
            log.append(line)
            if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
                http_port = int(m.group(1))
                break
        assert http_port, "".join(log)
        drain = threading.Thread(target=lambda: log.extend(serve.stderr or []), daemon=True)
        drain.start()
        c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=180)
        body = {"prompt": PROMPT, "max_tokens": 4000, "stream": True}
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        assert resp.status == 200
        _kill_server_under(serve, server, lambda: resp.readline().startswith(b"data:"))
        serve.wait(180)
        drain.join(30)
        c.close()
    finally:
        _stop([serve, server])
    _ended_with_one_line((serve.returncode, "".join(log)), ep)


def test_rpc_server_stopped_by_a_client_ends_with_one_line() -> None:
    """A client request that trips one of ggml's checks inside the server (a tensor outside its buffer) stops
    `gguf-mtp rpc-server` with one line and exit status 2, not SIGABRT (the server cannot go on either way)."""
    _need_rpc()
    port = _free_port()
    server = _start_rpc_server(port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as c:
            c.sendall(struct.pack("<BQ", _HELLO, 24) + bytes(24))
            assert _recv_exact(c, 8 + 28) is not None
            c.sendall(struct.pack("<BQIQ", 0, 12, 0, 4096))  # RPC_CMD_ALLOC_BUFFER: device 0, 4096 bytes
            rsp = _recv_exact(c, 8 + 16)
            assert rsp is not None
            remote = struct.unpack_from("<Q", rsp, 8)[0]
            assert remote
            # rpc_tensor: id, type F32, buffer, ne[4], nb[4], op, op_params[16], flags, src[10], view_src,
            # view_offs, data (0: outside the buffer), name[64], use_count; then offset and size
            tensor = struct.pack("<QIQ4I4II16ii10QQQQ64si", 1, 0, remote, 1, 1, 1, 1, 4, 4, 4, 4, 0, *[0] * 16, 0,
                                 *[0] * 10, 0, 0, 0, b"", 0)
            c.sendall(struct.pack("<BQ", 8, len(tensor) + 16) + tensor + struct.pack("<QQ", 0, 4))  # GET_TENSOR
            out, _ = server.communicate(timeout=60)
    finally:
        _stop([server])
    assert server.returncode == 2, (server.returncode, out[-3000:])
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"error: rpc-server on 127.0.0.1:{port}: ") and "restart it" in last, out[-3000:]
    assert "Traceback" not in out and "LWP" not in out, out[-3000:]
