"""The strings of llama.cpp's device options (``--device``, ``--device-draft``, ``--tensor-split``, ``--rpc``)
read into the typed values the library takes (``SessionConfig.devices``, ``tensor_split``, ``rpc``). Nothing
here needs llama.cpp: a malformed value is a one-line error before any file is opened."""

from __future__ import annotations

import math
import re

from gguf_mtp.errors import GgufMtpError


def device_list(value: str, option: str = "--device") -> list[str]:
    """``CUDA0,CUDA1`` -> names; ``none`` -> [] (nothing offloaded)."""
    names = [s.strip() for s in value.split(",")]
    if not value.strip() or any(not s for s in names):
        raise GgufMtpError(f"{option} {value!r}: a comma-separated list of device names (see --list-devices), or none")
    if names == ["none"]:
        return []
    if "none" in names:
        raise GgufMtpError(f"{option} {value!r}: 'none' stands alone")
    return names


def tensor_split(value: str) -> list[float]:
    """``3,1`` or ``3/1`` -> proportions, as llama.cpp's --tensor-split."""
    out = []
    for s in re.split(r"[,/]+", value.strip()):
        try:
            x = float(s)
        except ValueError:
            raise GgufMtpError(f"--tensor-split {value!r}: {s!r} is not a number; give proportions like 3,1") from None
        if not math.isfinite(x) or x < 0:
            raise GgufMtpError(f"--tensor-split {value!r}: proportions must be finite and >= 0")
        out.append(x)
    if not out or not any(out):
        raise GgufMtpError(f"--tensor-split {value!r}: at least one proportion must be above 0")
    return out


def endpoints(value: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` -> [(host, port)]. ggml's client splits at the first colon, so IPv6 literals
    cannot be named (it would abort on them): a host name or an IPv4 address."""
    out = []
    shown = repr(value) if len(value) <= 80 else f"{value[:60]!r}... ({len(value)} characters)"
    for s in value.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+):(\d{1,5})\s*", s)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise GgufMtpError(f"--rpc {shown}: {s.strip()[:60]!r} is not host:port with a host name or IPv4 "
                               "address (e.g. 192.168.1.20:50052)")
        host = m.group(1)
        # DNS limits (RFC 1035): 253 characters, dot-separated labels of 1-63; the resolver refuses others
        if len(host) > 253 or any(not 0 < len(label) <= 63 for label in host.removesuffix(".").split(".")):
            raise GgufMtpError(f"--rpc {shown}: the host {host[:60]!r}{'...' if len(host) > 60 else ''} is not a "
                               "valid host name (at most 253 characters, dot-separated parts of 1-63)")
        out.append((host, int(m.group(2))))
    return out
