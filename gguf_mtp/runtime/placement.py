"""Where a model's layers go: llama.cpp's placement (``--device``, ``--split-mode``, ``--tensor-split``,
``--main-gpu``, ``--device-draft``) as the fields of a llama_model_params, checked against the devices
before llama.cpp sees them: a split longer than the device list or a main GPU past its end is a one-line
error, not an abort inside ggml. The options' strings are parsed by the CLI (cli/device_options.py); device
names are resolved by :mod:`.devices`, RPC servers added by :mod:`.rpc`.

Placement facts (llama-model.cpp ``load_tensors``): llama.cpp keeps the token embeddings on the CPU (gguf-mtp
moves them to layer 0's device where they fit: :func:`place_embeddings`); offloaded layers are the model's last
``-ngl`` layers, cut into contiguous runs by the cumulative ``tensor_split``
fractions; the MTP blocks are the last layers of a model that carries them and the output layer (LM head)
comes after them. So the head of a bundled model (or a trunk merged with a head-only sidecar) can only be
placed with the model's layer split: ``draft_split`` puts the MTP blocks and the LM head on the draft
device and the trunk on the others. A self-contained sidecar is a model of its own, placed by its own
parameters.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..backends import Device, MiB
from ..errors import GgufMtpError
from . import llama
from .devices import resolve

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_model_params

    from ..ggufio.model import GGUFModel

SPLIT_MODES = {"none": 0, "layer": 1, "row": 2, "tensor": 3}  # enum llama_split_mode
EMBD_ENV = "GGUF_MTP_EMBD_ON_DEVICE"  # 0: the token embedding stays on the CPU, as llama.cpp keeps it
_EMBD_PATTERN = rb"^token_embd\.weight$"  # a std::regex in llama.cpp: fixed, never a user's text


class _BuftOverride(ctypes.Structure):
    """struct llama_model_tensor_buft_override (llama.h)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


@dataclass
class Placement:
    """llama.cpp's model placement options for one model. ``devices`` None: llama.cpp's default devices;
    [] (``none``): nothing offloaded."""

    devices: list[str] | None = None
    split_mode: str = "layer"
    tensor_split: list[float] | None = None
    main_gpu: int = 0

    def __post_init__(self) -> None:
        if self.split_mode not in SPLIT_MODES:
            raise GgufMtpError(f"--split-mode {self.split_mode!r}: one of {', '.join(SPLIT_MODES)}")
        if self.main_gpu < 0:
            raise GgufMtpError(f"--main-gpu {self.main_gpu}: an index into the device list, >= 0")


class ModelParams:
    """The placement fields of a llama_model_params, with the ctypes arrays they point to kept alive for the
    load (llama.cpp copies the device list and reads the split once)."""

    def __init__(self, p: Placement, *, draft_layers: tuple[int, int] | None = None,
                 draft_device: str | None = None, n_gpu_layers: int = 0) -> None:
        """``draft_layers`` (n_layer_all, n_mtp) with ``draft_device``: a model whose MTP blocks and LM head
        go to ``draft_device``, the trunk to ``p``'s devices (see :func:`draft_split`)."""
        import llama_cpp

        self.n_gpu_layers = n_gpu_layers
        self.split_mode = SPLIT_MODES[p.split_mode]
        self.main_gpu = p.main_gpu
        devs = resolve(p.devices)
        split = p.tensor_split
        if split is not None and len(split) > max(1, len(devs)):
            raise GgufMtpError(f"--tensor-split has {len(split)} proportions but the model is placed on "
                               f"{len(devs)} device(s) ({', '.join(d.name for d in devs) or 'none'}); "
                               "give one per device (fewer: the rest get 0)")
        if p.split_mode == "none" and devs and p.main_gpu >= len(devs):
            raise GgufMtpError(f"--main-gpu {p.main_gpu}: only {len(devs)} device(s) "
                               f"({', '.join(d.name for d in devs)}); --main-gpu indexes that list from 0")
        if draft_device is not None and draft_layers is not None:
            (dd,) = resolve([draft_device], "--device-draft")
            if p.split_mode in ("row", "tensor"):
                raise GgufMtpError(f"--device-draft with a bundled or head-only head places the head by layer; "
                                   f"--split-mode {p.split_mode} splits every layer over the devices: use layer")
            if p.split_mode == "none":
                devs = devs[p.main_gpu:p.main_gpu + 1]
            self.split_mode = SPLIT_MODES["layer"]  # two devices at least: the head's and the trunk's
            devs, split, self.n_gpu_layers = draft_split(devs, dd, split, n_gpu_layers, *draft_layers)
        self.devices = devs
        self.tensor_split = split
        self._devs = None
        if p.devices is not None or draft_device is not None:
            self._devs = (ctypes.c_void_p * (len(devs) + 1))(*[d.ptr for d in devs], None)
        self._split = None
        if split is not None:
            n = max(int(llama_cpp.llama_max_devices()), len(split))
            self._split = (ctypes.c_float * n)(*split)
        #: the device the token embedding goes to (None: the CPU, llama.cpp's place for it); see embed_on
        self.embd_device: Device | None = None
        self._overrides: ctypes.Array[_BuftOverride] | None = None

    def embed_on(self, device: Device, buft: int) -> None:
        """Put the token embedding (``token_embd.weight``) on ``device`` (its buffer type ``buft``), where layer 0
        is: its row lookup then runs in the device's graph instead of a CPU split before it."""
        self.embd_device = device
        self._overrides = (_BuftOverride * 2)(_BuftOverride(_EMBD_PATTERN, buft), _BuftOverride(None, None))

    def embed_on_cpu(self) -> None:
        """Back to llama.cpp's placement of the token embedding: the CPU."""
        self.embd_device, self._overrides = None, None

    def apply(self, mp: llama_model_params) -> None:
        """Fill a llama_model_params."""
        mp.n_gpu_layers = self.n_gpu_layers
        mp.split_mode = self.split_mode
        mp.main_gpu = self.main_gpu
        # [type: ignore] below: llama-cpp-python annotates these fields as arrays; llama.cpp takes the pointers
        if self._devs is not None:
            mp.devices = ctypes.cast(self._devs, ctypes.c_void_p)  # type: ignore[assignment]
        if self._split is not None:
            mp.tensor_split = ctypes.cast(self._split, ctypes.POINTER(ctypes.c_float))  # type: ignore[assignment]
        if self._overrides is not None:
            mp.tensor_buft_overrides = ctypes.cast(self._overrides, ctypes.c_void_p)  # type: ignore[assignment]

    def describe(self) -> str:
        names = ", ".join(d.name for d in self.devices) or "none"
        s = f"{names}, -ngl {self.n_gpu_layers}" if self.devices and self.n_gpu_layers else "CPU only"
        if self.tensor_split is not None and len(self.devices) > 1:
            s += f", split {':'.join(f'{x:g}' for x in self.tensor_split)}"
        if self.embd_device is not None:
            s += f", token embeddings on {self.embd_device.name}"
        return s


def _weights(devices: list[Device], tensor_split: list[float] | None) -> list[float]:
    """Each device's share of the offloaded layers as llama.cpp splits them: the given proportions (missing ones 0),
    else free memory."""
    if tensor_split is None:
        return [float(d.free or 1) for d in devices]
    return [float(x) for x in tensor_split[:len(devices)]] + [0.0] * (len(devices) - len(tensor_split))


def draft_split(trunk: list[Device], draft: Device, split: list[float] | None, n_gpu_layers: int,
                n_layer_all: int, n_mtp: int) -> tuple[list[Device], list[float], int]:
    """Device list, tensor split and -ngl that put the last ``n_mtp`` layers (the MTP blocks) and the output
    layer on ``draft`` and the offloaded trunk layers on ``trunk`` (proportions ``split``, default by free
    memory as llama.cpp), in whole layers so that llama.cpp's cut points fall exactly between them.

    llama.cpp gives offloaded layer ``j`` (0-based from the first offloaded one, ``act`` in all) to the first
    device whose cumulative fraction exceeds ``j / act``; with integer layer counts as proportions both sides
    are the same float division, so the cut is exact. -ngl counts every layer and the output layer, as in
    llama.cpp; the head and the output layer are always offloaded here."""
    n_head = n_mtp + 1
    if n_gpu_layers < 0:  # llama.cpp: a negative -ngl offloads every layer
        n_gpu_layers = n_layer_all + 1
    ngl = min(max(n_gpu_layers, n_head), n_layer_all + 1)
    n_trunk_off = ngl - n_head
    others = [d for d in trunk if d.ptr != draft.ptr]
    same = len(others) != len(trunk)  # the draft device also takes trunk layers
    weights = _weights(trunk, split)
    w_draft = sum(w for d, w in zip(trunk, weights) if d.ptr == draft.ptr)
    w = [w for d, w in zip(trunk, weights) if d.ptr != draft.ptr] + ([w_draft] if same else [])
    order = others + ([draft] if same else [])
    counts = [0] * len(order)
    if n_trunk_off > 0 and order:
        if not any(w):
            raise GgufMtpError("--tensor-split gives the trunk's devices no layers")
        cum, tot = [], 0.0
        for x in w:
            tot += x
            cum.append(tot / sum(w))
        for j in range(n_trunk_off):  # llama.cpp's rule, on the trunk's layers alone
            counts[next((i for i, c in enumerate(cum) if c > j / n_trunk_off), len(cum) - 1)] += 1
    elif n_trunk_off > 0:  # --device none for the trunk: it stays on the CPU
        ngl = n_head
    if same:
        counts[-1] += n_head
        return order, [float(c) for c in counts], ngl
    return order + [draft], [float(c) for c in counts] + [float(n_head)], ngl


#: what the device keeps free beyond the weights for the KV cache and compute buffers before it also takes the
#: token embedding: this much, or a tenth of its memory if that is more
EMBD_RESERVE = 1024 * MiB


def layer_zero_device(devices: list[Device], n_gpu_layers: int, n_layer_all: int, *, split_mode: int = 1,
                      tensor_split: list[float] | None = None, main_gpu: int = 0) -> Device | None:
    """The device llama.cpp gives layer 0 (llama-model.cpp ``load_tensors``), or None: the CPU. Layer 0 is offloaded
    only when -ngl covers every layer and the output layer (a negative -ngl: all); then it goes to the first device
    whose share of the split (default: by free memory) is above 0, or with ``split_mode`` none to ``main_gpu``."""
    if not devices or 0 <= n_gpu_layers < n_layer_all + 1:
        return None
    if split_mode == SPLIT_MODES["none"]:
        return devices[min(main_gpu, len(devices) - 1)]
    return next((d for d, w in zip(devices, _weights(devices, tensor_split)) if w > 0), None)


def embeddings_fit(device: Device, share: float, model_bytes: int, embd_bytes: int) -> bool:
    """Whether ``device`` holds its ``share`` of the weights (the embedding aside), the token embedding and still
    keeps ``EMBD_RESERVE`` (or a tenth of its memory, if more) free for the KV cache and compute buffers: free
    memory as it was before the load, a rule of thumb, so a model that fills a device keeps its embedding on the CPU."""
    need = (model_bytes - embd_bytes) * share + embd_bytes + max(EMBD_RESERVE, device.total // 10)
    return device.free >= need


def place_embeddings(mp: ModelParams, model: GGUFModel, n_layer_all: int) -> None:
    """Put ``model``'s token embedding on the device of its layer 0 when that device can look rows up in it and
    has room for it beside its share of the weights (``$GGUF_MTP_EMBD_ON_DEVICE=0``: never).

    llama.cpp keeps the token embedding in host memory, so every decode of an offloaded model starts with a CPU
    split (the lookup, then the rows copied to the device with a stream synchronisation) before the device's
    graph can start; a draft and a verify pay it once each. On the device the lookup is one more kernel of the
    captured graph. It costs the table's size in device memory. Not for RPC servers (remote memory, looked up
    over the network either way)."""
    if os.environ.get(EMBD_ENV, "1") == "0":
        return
    dev = layer_zero_device(mp.devices, mp.n_gpu_layers, n_layer_all, split_mode=mp.split_mode,
                            tensor_split=mp.tensor_split, main_gpu=mp.main_gpu)
    t = model.tensors.get("token_embd.weight")
    if dev is None or dev.backend == "RPC" or t is None or len(t.info.shape) != 2:
        return
    weights = _weights(mp.devices, mp.tensor_split)
    mine = sum(w for d, w in zip(mp.devices, weights) if d.ptr == dev.ptr)
    share = 1.0 if mp.split_mode == SPLIT_MODES["none"] or not sum(weights) else mine / sum(weights)
    if not embeddings_fit(dev, share, model.total_bytes, t.info.nbytes):
        return
    reg = llama.registry()
    if reg.supports_get_rows(dev, t.info.ggml_type, t.info.shape[0], t.info.shape[1]):
        mp.embed_on(dev, reg.buffer_type(dev))
