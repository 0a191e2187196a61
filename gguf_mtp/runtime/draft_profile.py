"""``--spec-draft-profile``: what ``--spec-draft-n-max auto`` measured in one run (the step time at each draft
length, the head's acceptance by position), saved by ``--spec-draft-profile-out`` and read back by a later run on
the same model and machine, so that its first answer does not explore.

Why: auto's first answer explores, four blocks of four steps at different lengths, and each change of length
pays for graph rebuilds. On an H100 that answer reached 0.78-0.90x the best fixed length where the second, which
starts from what the first measured, reached 0.95-0.98x. Step times belong to the model, the placement and the
machine, not to the text, so a later run can start from them (adaptive.py: ``DraftLength.seed``). The acceptance
comes along as a prior worth a few drafts that the run's own drafts soon outweigh.

A profile is read from one file and written to another: a command never rewrites a file it reads. One measured
for another model, head, placement or device is not used (a note says which), as its times would mislead; a file
that is not a profile, or holds values no run could have measured, is refused with one line.

Example:
    >>> from gguf_mtp.runtime import MTPSession, SessionConfig                        # doctest: +SKIP
    >>> from gguf_mtp.runtime import draft_profile                                    # doctest: +SKIP
    >>> with MTPSession("Qwen3.5-9B-Q8_0.gguf", config=SessionConfig(adaptive=True)) as s:  # doctest: +SKIP
    ...     note = draft_profile.use(s, "h100.json")      # None: seeded; else why not
    ...     s.generate("def quicksort(xs):", max_tokens=128)
    ...     draft_profile.save(s, "h100-next.json", force=False)
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, GgufMtpError
from ..files import open_input
from ..ggufio.atomic import write_bytes
from . import devices

if TYPE_CHECKING:
    from .session import MTPSession

FORMAT = "gguf-mtp draft profile"
VERSION = 1
MAX_BYTES = 64 << 10  # a profile is a few hundred bytes; anything far larger is not one
MAX_K = 16
MAX_DRAFTS = 10**12  # drafts one run counted: far more than any run makes, far less than a number that is no count


def key(s: MTPSession) -> dict[str, Any]:
    """What the times belong to: the files (names and sizes), where the layers run, and the largest draft length."""
    p, c = s.pairing, s.cfg
    out: dict[str, Any] = {"model": p.model.path.name, "model_bytes": sum(f.stat().st_size for f in p.model.files),
                           "head": p.source.value, "n_gpu_layers": c.n_gpu_layers,
                           "draft_gpu_layers": c.draft_gpu_layers, "n_draft_max": s.engine.n_draft_max,
                           "devices": [f"{d.name}: {d.description}" for d in devices.used(c.n_gpu_layers)]}
    if p.sidecar is not None:
        out["sidecar"] = p.sidecar.path.name
        out["sidecar_bytes"] = sum(f.stat().st_size for f in p.sidecar.files)
    return out


def save(s: MTPSession, path: str | os.PathLike[str], *, force: bool, inputs: list[Path] | None = None) -> Path:
    """Write what the session's ``auto`` measured to ``path`` (atomic; an existing file only with ``force``)."""
    a = s.engine.adaptive
    if a is None:
        raise GgufMtpError("--spec-draft-profile-out: the draft length is fixed; it needs --spec-draft-n-max auto")
    times, acc, drafts = a.measured(s.engine.stats)
    if not times:
        raise GgufMtpError(f"{path}: auto has not timed a step yet (the first ones after a change of length are not "
                           "timed); generate more tokens before saving a draft profile")
    payload = {"format": FORMAT, "version": VERSION, "key": key(s),
               "step_ms": {str(k): round(t * 1e3, 4) for k, t in times.items()},
               "acceptance_at": [round(x, 4) for x in acc], "drafted_at": drafts}
    return write_bytes(path, (json.dumps(payload, indent=2) + "\n").encode(), force=force, inputs=inputs or [])


def use(s: MTPSession, path: str | os.PathLike[str]) -> str | None:
    """Seed the session's ``auto`` with the profile at ``path``; None when it was used, else a note saying why not
    (measured for another model, head, placement or device). A file that is not a valid profile is an error."""
    a = s.engine.adaptive
    if a is None:
        raise GgufMtpError("--spec-draft-profile: the draft length is fixed; it needs --spec-draft-n-max auto")
    step_ms, acc, drafts, their = read(path)
    ours = key(s)
    diff = [k for k in sorted(set(ours) | set(their)) if ours.get(k) != their.get(k)]
    if diff:
        return (f"draft profile {path} was measured for another {', '.join(diff)} "
                f"({', '.join(f'{k}={their.get(k)!r}' for k in diff)}); not used")
    a.seed({k: t / 1e3 for k, t in step_ms.items()}, acc, drafts)
    return None


def read(path: str | os.PathLike[str]) -> tuple[dict[int, float], list[float], list[int], dict[str, Any]]:
    """The step times (ms by draft length), acceptance by position (and the drafts it was counted over) and key
    of the profile at ``path``."""
    try:
        with open_input(path, "draft profile") as fh:  # regular files only: a FIFO would block forever
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_BYTES:
                raise FormatError(f"{path}: {size} bytes, too large for a draft profile "
                                  f"(at most {MAX_BYTES}); pass a file --spec-draft-profile-out wrote")
            data = json.loads(fh.read(MAX_BYTES + 1).decode("utf-8"))
    except FileNotFoundError:
        raise GgufMtpError(f"{path}: no such file; write one with --spec-draft-profile-out") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise FormatError(f"{path}: not valid JSON ({str(e)[:80]}); pass a file --spec-draft-profile-out wrote"
                          ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FormatError(f"{path}: not a gguf-mtp draft profile (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise FormatError(f"{path}: draft profile version {data.get('version')!r}; this gguf-mtp reads {VERSION}: "
                          "write it again with --spec-draft-profile-out")
    their = data.get("key")
    if not isinstance(their, dict):
        raise FormatError(f"{path}: key \"key\" must be an object")
    raw = data.get("step_ms")
    if not isinstance(raw, dict) or not raw or len(raw) > MAX_K + 1:
        raise FormatError(f"{path}: key \"step_ms\" must map draft lengths 0-{MAX_K} to milliseconds")
    step_ms: dict[int, float] = {}
    for k, v in raw.items():
        # the length first: int() of a 5000-digit key raises (Python's limit on digits) instead of comparing
        if not (isinstance(k, str) and len(k) <= 2 and k.isdigit() and int(k) <= MAX_K):
            raise FormatError(f"{path}: step_ms key {k[:20]!r}{'...' if len(k) > 20 else ''} is not a draft length "
                              f"0-{MAX_K}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 < v <= 60_000):
            raise FormatError(f"{path}: step_ms[{k!r}] = {v!r} is not a step time in milliseconds (0-60000)")
        step_ms[int(k)] = float(v)
    acc = data.get("acceptance_at", [])
    if not isinstance(acc, list) or len(acc) > MAX_K or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1 for x in acc):
        raise FormatError(f"{path}: key \"acceptance_at\" must be a list of at most {MAX_K} shares (0-1)")
    drafts = data.get("drafted_at", [])
    if not isinstance(drafts, list) or len(drafts) != len(acc) or any(
            isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= MAX_DRAFTS for x in drafts):
        raise FormatError(f"{path}: key \"drafted_at\" must list a count of drafts (0 to "
                          f"{MAX_DRAFTS:.0e}) for each acceptance_at entry")
    return step_ms, [float(x) for x in acc], drafts, their
