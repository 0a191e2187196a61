"""bench/gpu_timeline.py's reading of a profiler trace: GPU events attributed to the runtime call that launched them
(through the launch's correlation id and the range around the call), the per-call table, kernel families and the
GPU's idle time by transition. The trace is written here in kineto's chrome-trace form, so the numbers are known."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bench.gpu_timeline import calls_from_trace, load_trace, report

pytestmark = pytest.mark.fast  # reads a written trace: no llama.cpp needed to run

PID, TID = 100, 100
FAMILIES = "decode[tgt] n=2: kernel families, own us a call (a kernel's wait for the one before it left out)"


def _range(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur}


def _launch(corr: int, ts: float, name: str = "cudaGraphLaunch") -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": 5,
            "args": {"correlation": corr}}


def _kernel(corr: int | None, ts: float, dur: float, name: str, cat: str = "kernel") -> dict:
    args = {"stream": 7} if corr is None else {"stream": 7, "correlation": corr}
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def _step(t: float, corr: int) -> list[dict]:
    """One k=1 step at host time t: the verify's decode (two kernels, 1000 us), its sync, the draft's decode
    (one kernel, 100 us) launched 50 us after the verify ended on the GPU, and a sampler read with its copy."""
    return [
        _range("decode[tgt] n=2", t, 30), _launch(corr, t + 10),
        _kernel(corr, t + 40, 600, "void mul_mat_vec_q<(ggml_type)8, 2>(const void *, float *)"),
        _kernel(corr, t + 640, 400, "void rms_norm_f32<1024>(const float *, float *)"),
        _range("sync[tgt]", t + 35, 1010),
        _range("decode[mtp] n=2", t + 1060, 20), _launch(corr + 1, t + 1070),
        _kernel(corr + 1, t + 1090, 100, "void mul_mat_vec_q<(ggml_type)8, 2>(const void *, float *)"),
        _range("sample", t + 1195, 10), _launch(corr + 2, t + 1196, "cudaMemcpyAsync"),
        _kernel(corr + 2, t + 1197, 2, "Memcpy DtoH", cat="gpu_memcpy"),
    ]


def trace(steps: int = 3) -> list[dict]:
    events = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}}]
    for i in range(steps):
        events += _step(1300.0 * i, 10 * i + 1)
    return events


def test_each_kernel_goes_to_the_call_that_launched_it() -> None:
    calls, stray = calls_from_trace(trace())
    by = {c.label: c for c in calls}
    assert not stray
    assert sorted(by) == ["decode[mtp] n=2", "decode[tgt] n=2", "sample", "sync[tgt]"]
    verify = [c for c in calls if c.label == "decode[tgt] n=2"]
    assert [len(c.gpu) for c in verify] == [2, 2, 2] and all(not c.gpu for c in calls if c.label == "sync[tgt]")
    assert [round(c.gpu[0][0]) for c in verify] == [40, 1340, 2640]


def test_a_launch_outside_every_range_and_an_uncorrelated_kernel_are_kept_apart() -> None:
    events = trace(1) + [_launch(99, 5000), _kernel(99, 5010, 30, "void k_other()"), _kernel(None, 5050, 5, "x")]
    calls, stray = calls_from_trace(events)
    assert sorted(n for _, _, n in stray) == ["void k_other()", "x"]
    assert sum(len(c.gpu) for c in calls) == 4


def test_report_gives_gpu_time_families_and_idle_by_transition(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": trace()}, fh)
    calls, stray = calls_from_trace(load_trace(path))
    out = report(calls, stray, steps=3)
    lines = out.splitlines()
    verify = next(x for x in lines if x.startswith("decode[tgt] n=2 "))
    assert verify.split()[2:7] == ["1.00", "30.0", "1000.0", "1000.0", "2.0"], verify
    draft = next(x for x in lines if x.startswith("decode[mtp] n=2 "))
    assert draft.split()[4] == "100.0", draft
    fam = lines.index(FAMILIES)
    assert lines[fam + 1].split(None, 2) == ["600.0", "x1.0", "mul_mat_vec_q<(ggml_type)8, 2>"]
    idle = {x.split(None, 1)[1]: float(x.split()[0]) for x in lines[lines.index(
        "GPU idle by transition (what ran last -> what ran next), us a step") + 1:]}
    # verify ends at t+1040, the draft runs t+1090..1190, the read's copy t+1197..1199, the next verify starts at t+1340
    # (the last step has no next verify: 2 of those gaps over 3 steps)
    assert idle["verify -> draft"] == 50.0 and idle["draft -> sample"] == 7.0
    assert idle["sample -> verify"] == round(2 * 141 / 3, 1)


def test_a_kernel_launched_early_counts_only_its_own_time() -> None:
    """Under programmatic dependent launch the norm's recorded start (t+600) comes before the mat-vec's end (t+640):
    its family gets the 400 us after that end, and the verify's GPU time stays the union, 1000 us."""
    events = []
    for e in trace(1):
        if e.get("name", "").startswith("void rms_norm"):
            e = dict(e, ts=e["ts"] - 40, dur=e["dur"] + 40)
        events.append(e)
    lines = report(*calls_from_trace(events), steps=1).splitlines()
    assert next(x for x in lines if x.startswith("decode[tgt] n=2 ")).split()[4] == "1000.0"
    fam = lines.index(FAMILIES)
    assert [x.split()[0] for x in lines[fam + 1:fam + 3]] == ["600.0", "400.0"], lines[fam + 1:fam + 3]


def test_a_trace_without_gpu_events_says_so() -> None:
    calls, stray = calls_from_trace([_range("decode[tgt] n=1", 0, 10)])
    assert report(calls, stray, steps=1).startswith("no GPU events")


def test_idle_inside_a_decode_is_put_on_the_event_after_the_gap() -> None:
    """The verify's two kernels run t+40..640 and t+650..1050 (10 us apart), the second preceded by an input copy
    at t+642..644: two gaps inside its span, 2 us before the copy and 6 us before the norm; a 0.5 us boundary is no
    gap. The draft has one kernel: no gap, no table."""
    events = []
    for e in trace(2):
        if e.get("name", "").startswith("void rms_norm"):
            e = dict(e, ts=e["ts"] + 10)
        events.append(e)
    for t in (0.0, 1300.0):
        events.append(_kernel(10 * int(t // 1300) + 1, t + 642, 2, "Memcpy HtoD", cat="gpu_memcpy"))
        events.append(_kernel(10 * int(t // 1300) + 1, t + 1050.5, 1, "void k_tail()"))
    lines = report(*calls_from_trace(events), steps=2).splitlines()
    head = "decode[tgt] n=2: idle inside the span, us a call, by the GPU event after the gap"
    i = lines.index(head)
    assert [x.split(None, 2) for x in lines[i + 1:i + 3]] == [["6.0", "x1.0", "rms_norm_f32<1024>"],
                                                              ["2.0", "x1.0", "Memcpy HtoD"]], lines[i:i + 4]
    assert not any(x.startswith("decode[mtp] n=2: idle inside") for x in lines)


def test_a_copy_is_named_with_its_memory_kinds_and_size() -> None:
    """kineto names a copy ``Memcpy DtoH (Device -> Pinned)`` and gives its size in ``args.bytes``; a kernel family
    ends at the first parenthesis, which left every copy of a decode as one ``Memcpy DtoH`` row. Two copies of the
    draft's decode, of different sizes and memory, must stay two rows, each with its own time."""
    events = trace(1)
    for ts, dur, kind, n in ((1191, 3, "(Device -> Pinned)", 16384), (1194, 5, "(Device -> Pageable)", 4)):
        copy = _kernel(2, ts, dur, "Memcpy DtoH " + kind, cat="gpu_memcpy")  # after the draft's kernel
        copy["args"]["bytes"] = n
        events.append(copy)
    lines = report(*calls_from_trace(events), steps=1).splitlines()
    i = lines.index("decode[mtp] n=2: kernel families, own us a call (a kernel's wait for the one before it left out)")
    rows = {x.split(None, 2)[2]: x.split(None, 2)[0] for x in lines[i + 1:i + 4]}
    assert rows.get("Memcpy DtoH [Device -> Pageable] 4 B") == "5.0", lines[i:i + 4]
    assert rows.get("Memcpy DtoH [Device -> Pinned] 16384 B") == "3.0", lines[i:i + 4]


def test_a_sequence_lists_one_calls_events_in_order_with_their_grids() -> None:
    """Two mat-vecs of one family tell apart by their grids (the rows they read): the listing must keep each event
    with its own grid, in the order the events ran, from the call of median GPU time (the second step's draft here,
    made longer than the first and shorter than the third)."""
    from bench.gpu_timeline import sequence

    events = []
    for e in trace(3):
        if e.get("cat") == "kernel" and e["args"].get("correlation") in (2, 12, 22):  # each step's draft kernel
            step = (e["args"]["correlation"] - 2) // 10
            e = dict(e, dur={0: 80, 1: 100, 2: 120}[step], args=dict(e["args"], grid=[12288, 1, 1]))
            events.append(e)
            second = dict(e, ts=e["ts"] - 30, dur=20, name="void quantize_q8_1(const float *)",
                          args=dict(e["args"], grid=[16, 1, 1]))
            events.append(second)
            continue
        events.append(e)
    out = sequence(*calls_from_trace(events)[:1], "decode[mtp] n=2").splitlines()
    assert out[0].startswith("decode[mtp] n=2: one call's GPU events in order (of 3; median GPU time 120.0 us)"), out
    rows = [x.split() for x in out[2:4]]
    assert [(r[0], r[2], r[3]) for r in rows] == [("0.0", "16,1,1", "quantize_q8_1"),
                                                  ("30.0", "12288,1,1", "mul_mat_vec_q<(ggml_type)8,")], rows
    # then the host's CUDA calls inside that call, from its start (the second step's 2600 + 1060): its launch at +10
    # for 5 us; its first GPU event (the quantize, moved 30 us before the mat-vec at +30) began at +0
    assert out[4].startswith("decode[mtp] n=2: the same call's CUDA API calls on the host"), out
    assert "host time 20.0 us; its first GPU event began at 0.0 us" in out[4], out[4]
    assert [x.split() for x in out[6:]] == [["10.0", "5.0", "cudaGraphLaunch"]], out[6:]
    assert sequence(*calls_from_trace(events)[:1], "decode[mtp] n=9").endswith("no such call with GPU events")


def test_a_calls_host_cuda_calls_are_its_own_launching_or_not() -> None:
    """A synchronisation launches no GPU work and is still the call's (it is where the host waits), while a launch
    made in another thread's range, or outside every range, is not."""
    events = trace(1)
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": PID, "tid": TID,
                   "ts": 1065.0, "dur": 4.0})  # inside decode[mtp] n=2 (1060-1080), no correlation
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": PID, "tid": TID + 1,
                   "ts": 1066.0, "dur": 1.0})  # another thread: no range of its own, falls to every call's
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecord", "pid": PID, "tid": TID,
                   "ts": 1100.0, "dur": 1.0})  # after every range ended: nobody's
    calls = {c.label: c for c in calls_from_trace(events)[0]}
    assert [n for _, _, n in sorted(calls["decode[mtp] n=2"].host)] == [
        "cudaStreamSynchronize", "cudaMemcpyAsync", "cudaGraphLaunch"]
    assert [n for _, _, n in calls["decode[tgt] n=2"].host] == ["cudaGraphLaunch"]
