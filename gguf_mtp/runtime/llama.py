"""A thin, safe layer over llama-cpp-python's ctypes API: load a model, make a (target or MTP) context,
tokenize, decode, read logits. llama.cpp's log is captured, so a failed load can say why in one line.

Signals: Python runs a signal handler at the next Python code it executes, which during a long C call is one of
llama.cpp's callbacks (the log, a load's progress). An exception raised there cannot cross the C frames: ctypes
would print "Exception ignored" and drop it, so Ctrl-C and SIGTERM were lost. Here every callback keeps such an
exception (:func:`_keep_interrupt`, and an unraisable hook for one raised on the callback's first instruction),
a load's progress callback then stops the load, and the exception is raised again once the C call returns.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import functools
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .. import backends
from ..errors import GgufMtpError, Terminated
from . import patches
from .arch_facts import arch_facts

if TYPE_CHECKING:
    from .placement import ModelParams

try:
    import llama_cpp as _ll
    import llama_cpp.llama_cpp_ext as _ext
except Exception as e:  # noqa: BLE001 - not installed, or its shared library does not load
    raise GgufMtpError(f"llama-cpp-python cannot be loaded ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                       "`gguf-mtp run` and `quantize` need it: run `bash scripts/setup.sh`") from None

_lock = threading.Lock()
_log: list[str] = []
_initialised = False
VERBOSE = bool(os.environ.get("GGUF_MTP_LLAMA_LOG"))


#: an interrupt (KeyboardInterrupt, Terminated) raised inside a llama.cpp callback, raised again after the call
_interrupts: list[BaseException] = []
_INTERRUPTS = (KeyboardInterrupt, Terminated)


def _keep_interrupt(e: BaseException) -> None:
    if not _interrupts:
        _interrupts.append(e)


def interrupt(e: BaseException) -> None:
    """Hand ``e`` to the llama.cpp call in progress on another thread: a model load raises it at its next progress
    report (and ``raise_interrupt`` after any long call); the first interrupt handed over wins."""
    _keep_interrupt(e)


def raise_interrupt() -> None:
    """Raise the interrupt a llama.cpp callback caught (if any): call after each long C call returns."""
    if _interrupts:
        raise _interrupts.pop()


def _unraisable(u: sys.UnraisableHookArgs) -> None:
    """An interrupt raised before a callback's ``try`` (on its first instruction) reaches ctypes, which hands it
    here instead of to the caller: keep it. Anything else goes to the previous hook."""
    if isinstance(u.exc_value, _INTERRUPTS):
        _keep_interrupt(u.exc_value)
    else:
        _previous_unraisable(u)


_previous_unraisable = sys.unraisablehook


@_ll.llama_log_callback
def _on_log(level: int, text: bytes, user: ctypes.c_void_p) -> None:
    try:
        s = text.decode("utf-8", "replace")
        _log.append(s)
        del _log[:-200]
        if VERBOSE:
            os.write(2, text)
    except _INTERRUPTS as e:  # a Ctrl-C or SIGTERM that arrived during the C call: never lost here
        _keep_interrupt(e)
    except Exception:  # noqa: BLE001 - a log line is not worth a crash (stderr closed, ...)
        pass


@_ll.llama_progress_callback
def _on_progress(progress: float, user: ctypes.c_void_p) -> bool:
    """A model load's progress: False (llama.cpp stops loading) once an interrupt is waiting."""
    try:
        return not _interrupts
    except _INTERRUPTS as e:
        _keep_interrupt(e)
        return False


def _init() -> None:
    global _initialised, _previous_unraisable
    with _lock:
        if not _initialised:
            if sys.unraisablehook is not _unraisable:
                _previous_unraisable = sys.unraisablehook
                sys.unraisablehook = _unraisable
            if os.environ.get("GGUF_MTP_LLAMA_LOG") != "raw":  # raw: llama.cpp prints to stderr itself
                _ll.llama_log_set(_on_log, ctypes.c_void_p(0))
            atexit.register(_release_log)  # raw too: llama-cpp-python's own callback is Python as well
            _ll.llama_backend_init()
            patches.enable_switches()  # before any context: ggml reads them when a scheduler is made
            _initialised = True


def registry() -> backends.Registry:
    """ggml's device registry as libllama sees it."""
    _init()  # llama.cpp's log goes to our buffer before a backend starts talking
    # libllama's own handle (dlsym searches its dependencies): a wheel holds libggml.so and libggml.so.0 as two
    # files, llama-cpp-python loads the first and libllama the second, each with its own registry, and only
    # libllama's sees the RPC servers --rpc adds
    return backends.Registry(ctypes.CDLL(_ll.llama_cpp._lib._name))


@functools.cache
def _mtp_chain_fn():  # type: ignore[no-untyped-def]
    """``llama_set_mtp_chain`` of the mtp-draft-chain patch: not in llama-cpp-python's bindings."""
    fn = ctypes.CDLL(_ll.llama_cpp._lib._name).llama_set_mtp_chain
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int32], None
    return fn


@functools.cache
def _row_address_fns():  # type: ignore[no-untyped-def]
    """``llama_get_embeddings_nextn`` and ``llama_get_embeddings_nextn_ith`` returning the address as an int, for
    :func:`_f32_view` (llama_cpp_ext's return a float pointer, which numpy converts on every call)."""
    lib = ctypes.CDLL(_ll.llama_cpp._lib._name)

    def first(*names: str):  # type: ignore[no-untyped-def]  # C++ linkage may mangle them, as llama_cpp_ext allows
        return getattr(lib, next(n for n in names if hasattr(lib, n)))

    rows = first("llama_get_embeddings_nextn", "_Z26llama_get_embeddings_nextnP13llama_context",
                 "?llama_get_embeddings_nextn@@YAPEAMPEAUllama_context@@@Z")
    row = first("llama_get_embeddings_nextn_ith", "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
                "?llama_get_embeddings_nextn_ith@@YAPEAMPEAUllama_context@@H@Z")
    rows.argtypes, rows.restype = [ctypes.c_void_p], ctypes.c_void_p
    row.argtypes, row.restype = [ctypes.c_void_p, ctypes.c_int32], ctypes.c_void_p
    return rows, row


def _f32_view(views: dict[tuple[int, tuple[int, ...]], np.ndarray], addr: int, shape: tuple[int, ...]) -> np.ndarray:
    """A float32 view of ``shape`` at ``addr``, made once per (address, shape) and kept in ``views``: llama.cpp
    hands out the same buffer decode after decode, and a step reads hidden rows on its critical path."""
    key = (addr, shape)
    v = views.get(key)
    if v is None:
        if len(views) >= 64:  # bounded: a buffer that moved leaves no views behind for long
            views.clear()
        raw = memoryview((ctypes.c_float * int(np.prod(shape))).from_address(addr))
        v = views[key] = np.frombuffer(raw, dtype=np.float32).reshape(shape)
    return v


@functools.cache
def _device_token_fns():  # type: ignore[no-untyped-def]
    """``llama_keep_sampled_token`` and ``llama_set_tokens_from`` of the device-draft-tokens patch: not in
    llama-cpp-python's bindings."""
    lib = ctypes.CDLL(_ll.llama_cpp._lib._name)
    keep, take = lib.llama_keep_sampled_token, lib.llama_set_tokens_from
    keep.argtypes, keep.restype = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32], ctypes.c_bool
    take.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)]
    take.restype = ctypes.c_bool
    return keep, take


@functools.cache
def _device_feed_fns():  # type: ignore[no-untyped-def]
    """``llama_keep_nextn_rows`` and ``llama_set_nextn_from`` of the device-draft-tokens patch (hidden rows for an
    MTP context's decode), or None where the loaded library lacks them."""
    lib = ctypes.CDLL(_ll.llama_cpp._lib._name)
    if not (hasattr(lib, "llama_keep_nextn_rows") and hasattr(lib, "llama_set_nextn_from")):
        return None
    keep, take = lib.llama_keep_nextn_rows, lib.llama_set_nextn_from
    keep.argtypes, keep.restype = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32], ctypes.c_bool
    take.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)]
    take.restype = ctypes.c_bool
    return keep, take


@functools.cache
def _self_feed_fns():  # type: ignore[no-untyped-def]
    """``llama_keep_output_nextn_row`` and ``llama_get_kept_tokens`` of the proposed mtp-self-feed patch (an MTP
    context's next draft from its own outputs on the device), or None where the loaded library lacks them."""
    lib = ctypes.CDLL(_ll.llama_cpp._lib._name)
    if not (hasattr(lib, "llama_keep_output_nextn_row") and hasattr(lib, "llama_get_kept_tokens")):
        return None
    keep, read = lib.llama_keep_output_nextn_row, lib.llama_get_kept_tokens
    keep.argtypes, keep.restype = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32], ctypes.c_bool
    read.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)]
    read.restype = ctypes.c_bool
    return keep, read


def has_device_feed() -> bool:
    """Whether the loaded library lets an MTP context's decode take its token ids and hidden rows from the target's
    outputs on the device (:meth:`Context.keep_nextn_rows`, :meth:`Context.take_nextn_from`)."""
    return _device_feed_fns() is not None


#: GGUF_MTP_AMX=1 keeps ggml's AMX weight buffers on a CPU that has them (see ``amx_off``)
AMX_ENV = "GGUF_MTP_AMX"


@functools.cache
def amx_off() -> bool:
    """Whether weights are kept out of the CPU's extra buffer types because one of them is ggml's AMX buffer.

    ggml's AMX matrix kernels crash with SIGSEGV on some CPUs that have AMX (ggml-org/llama.cpp#20824, closed
    unfixed; seen on the Sapphire Rapids machines this project runs on, for every Q8_0 and Q4 model). llama.cpp
    offers no switch for AMX alone, so on such a CPU all extra buffer types are off, as llama.cpp's
    ``--no-repack`` does: slower prompt processing on the CPU, and no crash."""
    if os.environ.get(AMX_ENV) == "1":
        return False
    return "AMX" in registry().extra_buffer_types("CPU")


def _release_log() -> None:
    """At exit, before the interpreter frees our log callback: llama.cpp's log back to its own (stderr). A line
    logged while the process ends (a back-end's teardown, e.g. CUDA's) would otherwise call freed memory, and the
    process died by SIGSEGV after its work was done."""
    _ll.llama_log_set(_ll.llama_log_callback(), ctypes.c_void_p(0))  # NULL: its default logger


def last_error() -> str:
    """The most telling recent llama.cpp log line (errors first)."""
    for words in (("error",), ("failed", "wrong", "abort")):
        for s in reversed(_log):
            if any(w in s.lower() for w in words):
                return s.strip()
    return _log[-1].strip() if _log else "no log output"


def file_types() -> dict[str, int]:
    """``{"Q4_K_M": 15, ...}``: llama.cpp's file types by their llama-quantize names."""
    pre = "LLAMA_FTYPE_MOSTLY_"
    names = {k[len(pre):]: int(v) for k, v in vars(_ll).items() if k.startswith(pre) and isinstance(v, int)}
    names.update({"F32": int(_ll.LLAMA_FTYPE_ALL_F32)})
    return names


#: what a warm-up decodes (Model.warmup_tokens): plain prose and code, as prompts usually are
WARMUP_TEXT = "The quick brown fox jumps over the lazy dog.\ndef add(a, b):\n    return a + b\n"


class QuantizeFailed(GgufMtpError):
    """``llama_model_quantize`` failed; ``errno`` is the C library's error code as the call returned (a failed
    write leaves ENOSPC, EFBIG, ... there; llama.cpp's own message only says ``iostream error``)."""

    def __init__(self, message: str, errno_: int) -> None:
        super().__init__(message)
        self.errno = errno_


def _quantize_fn() -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    """``llama_model_quantize`` through a handle that keeps the call's ``errno`` (ctypes.get_errno)."""
    lib = ctypes.CDLL(_ll.llama_cpp._lib._name, use_errno=True)
    fn = lib.llama_model_quantize
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ll.llama_model_quantize_params)]
    fn.restype = ctypes.c_uint32
    return fn


def quantize_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *, threads: int = 0,
                  tensor_types: Sequence[tuple[str, int]] = (), imatrix: dict[str, np.ndarray] | None = None,
                  allow_requantize: bool = False) -> None:
    """llama.cpp's quantizer (``llama_model_quantize``) in this process: write ``dst`` (as is, not atomically)
    from ``src`` as ``ftype``, a key of :func:`file_types`. One C call that cannot be interrupted: callers run it
    in a child process (:mod:`gguf_mtp.runtime.quantizer`).

    ``tensor_types``: ``(regex, ggml type)`` pairs that override the type of matching tensors (as
    llama-quantize's ``--tensor-type``); ``imatrix``: per-tensor importance (see :mod:`gguf_mtp.imatrix`);
    ``allow_requantize``: as llama-quantize's ``--allow-requantize``. Raises :class:`QuantizeFailed`.
    """
    _init()
    params = _ll.llama_model_quantize_default_params()
    params.ftype = file_types()[ftype]
    params.nthread = threads
    params.allow_requantize = allow_requantize
    keep: list[object] = []  # ctypes buffers that must outlive the call
    # [type: ignore] below: llama-cpp-python annotates .pattern and .name as bytes; ctypes takes a c_char_p
    if tensor_types:
        arr = (_ll.llama_model_tensor_override * (len(tensor_types) + 1))()
        for i, (pattern, gtype) in enumerate(tensor_types):
            b = ctypes.create_string_buffer(pattern.encode())
            keep.append(b)
            arr[i].pattern = ctypes.cast(b, ctypes.c_char_p)  # type: ignore[assignment]
            arr[i].type = int(gtype)
        arr[len(tensor_types)].pattern = None
        params.tt_overrides = arr
        keep.append(arr)
    if imatrix:
        data = (_ll.llama_model_imatrix_data * (len(imatrix) + 1))()
        for i, (name, values) in enumerate(imatrix.items()):
            v = np.ascontiguousarray(values, dtype=np.float32)
            nb = ctypes.create_string_buffer(name.encode())
            keep += [v, nb]
            data[i].name = ctypes.cast(nb, ctypes.c_char_p)  # type: ignore[assignment]
            data[i].data = v.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            data[i].size = v.size
        data[len(imatrix)].name = None
        params.imatrix = data
        keep.append(data)
    _log.clear()
    ctypes.set_errno(0)
    rc = _quantize_fn()(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    code = ctypes.get_errno()
    if rc != 0:
        raise QuantizeFailed(f"{src}: llama.cpp could not quantize to {ftype}: {last_error()}",
                             code if code in _WRITE_ERRNOS else 0)


#: errno values a failed write of the output leaves (the only ones a quantizer's failure is reported by)
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


def _host_sampling(n_gpu_layers: int, placement: ModelParams | None) -> str | None:
    """``backends.host_sampling_reason`` for the devices a model's layers go to (llama.cpp's defaults without a
    placement), under ``$GGUF_MTP_DEVICE_SAMPLING``."""
    ngl = placement.n_gpu_layers if placement is not None else n_gpu_layers
    offload = ((placement.devices if placement is not None else backends.default_devices(registry().devices()))
               if ngl else [])
    try:
        return backends.host_sampling_reason(offload, os.environ.get(backends.SAMPLING_ENV))
    except ValueError as e:
        raise GgufMtpError(str(e)) from None


class Model:
    """A loaded llama.cpp model. ``load_mtp`` must be true whenever an MTP context will be made on it."""

    def __init__(self, path: str | os.PathLike[str], *, load_mtp: bool = False, n_gpu_layers: int = 0,
                 use_mmap: bool = True, file_ptr: int | None = None, placement: ModelParams | None = None) -> None:
        """``placement``: devices, split mode, tensor split and main GPU (its -ngl replaces ``n_gpu_layers``)."""
        _init()
        self.path = Path(path)
        #: why its contexts sample on the host, not inside the decode graph (None: they may; see set_sampler)
        self.host_sampling = _host_sampling(n_gpu_layers, placement)
        p = _ll.llama_model_default_params()
        p.n_gpu_layers = n_gpu_layers
        if placement is not None:
            placement.apply(p)  # its ctypes arrays stay alive with it until the load returns
        p.load_mtp = load_mtp
        if amx_off():
            p.use_extra_bufts = False
        if not use_mmap or file_ptr is not None:  # a FILE * cannot be mapped
            p.load_mode = _ll.LLAMA_LOAD_MODE_NONE
        p.progress_callback = _on_progress  # stops the load on Ctrl-C / SIGTERM (see the module's docstring)
        self._open_contexts = 0  # contexts made on it and not yet freed: the model is freed after them
        self._close_pending = False
        _log.clear()
        if file_ptr is not None:  # a FILE * (e.g. a virtual merged model)
            self.ptr = _ll.llama_model_load_from_file_ptr(ctypes.c_void_p(file_ptr), p)
        else:
            self.ptr = _ll.llama_model_load_from_file(str(self.path).encode(), p)
        if _interrupts:
            self.close()
            raise_interrupt()
        if not self.ptr:
            raise GgufMtpError(f"{self.path}: llama.cpp could not load the model: {last_error()}")
        self.vocab = _ll.llama_model_get_vocab(self.ptr)
        self.n_vocab = _ll.llama_vocab_n_tokens(self.vocab)
        # each token's text and end-of-generation flag, as first asked: generation asks both for every token it
        # emits, between two decodes (at most n_vocab entries)
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self.n_embd = _ll.llama_model_n_embd(self.ptr)
        self.n_nextn = _ll.llama_model_n_layer_nextn(self.ptr)
        self.n_embd_out = _ll.llama_model_n_embd_out(self.ptr) or self.n_embd
        # per-sequence recurrent state (Mamba, Gated DeltaNet, ...), alone or beside an attention KV cache
        self.recurrent = bool(_ll.llama_model_is_recurrent(self.ptr) or _ll.llama_model_is_hybrid(self.ptr))
        self.load_mtp = load_mtp

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as llama.cpp prints it, or None when the file lacks the key."""
        buf = ctypes.create_string_buffer(256)
        n = _ll.llama_model_meta_val_str(self.ptr, key.encode(), buf, 256)
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def yarn_betas(self) -> tuple[float, float] | None:
        """The file's YaRN ``beta_fast`` / ``beta_slow``. Most arch loaders (deepseek2 among them) never read these
        keys and use 32 / 1; Kimi-K2's 1 / 1 therefore only take effect as context parameters."""
        arch = self.meta("general.architecture")
        fast, slow = (self.meta(f"{arch}.rope.scaling.yarn_beta_{k}") for k in ("fast", "slow"))
        return (float(fast), float(slow)) if fast is not None and slow is not None else None

    def warmup_tokens(self, n: int = 8) -> list[int]:
        """``n`` tokens for a warm-up prompt: a short ordinary text in the model's own vocabulary, so that an MoE
        model routes them to different experts as real text does (one token repeated reaches the same experts
        every time and makes a batch look cheaper than it is); BOS (or the first token) where the text gives
        fewer."""
        bos = int(_ll.llama_vocab_bos(self.vocab))
        fill = bos if 0 <= bos < self.n_vocab else 0
        toks = [t for t in self.tokenize(WARMUP_TEXT, add_special=False, parse_special=False) if 0 <= t < self.n_vocab]
        return (toks + [fill] * n)[:n]

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (_ll.llama_token * n_max)()
        n = _ll.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            raise GgufMtpError(f"{self.path}: tokenization needs {-n} tokens, more than expected")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = _ll.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = _ll.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
        text = self._pieces[token] = buf.raw[:n]
        return text

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(_ll.llama_vocab_is_eog(self.vocab, token))
        return eog

    def close(self) -> None:
        """Free the model, or (while a context made on it is open) as soon as the last one is closed: a context
        freed after its model reads freed memory. Python gives no order to objects collected together (a cycle,
        the interpreter's exit), where that crashed CUDA processes at exit."""
        if getattr(self, "ptr", None):
            if getattr(self, "_open_contexts", 0) > 0:
                self._close_pending = True
                return
            _ll.llama_model_free(self.ptr)
            self.ptr = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class Batch:
    """A reusable llama_batch over our own ctypes arrays: tokens, and (for MTP contexts) one hidden row
    per token beside the token, which llama.cpp's NextN graphs read together."""

    def __init__(self, capacity: int, n_embd: int = 0, seq: int = 0) -> None:
        self.capacity, self.n_embd = capacity, n_embd
        self._tok = (_ll.llama_token * capacity)()
        self._pos = (_ll.llama_pos * capacity)()
        self._nseq = (ctypes.c_int32 * capacity)()
        self._seq_store = (ctypes.c_int32 * capacity)()  # every token in sequence ``seq``
        self._seq = (ctypes.POINTER(ctypes.c_int32) * capacity)()
        base, size = ctypes.addressof(self._seq_store), ctypes.sizeof(ctypes.c_int32)
        for i in range(capacity):
            self._seq[i] = ctypes.cast(base + i * size, ctypes.POINTER(ctypes.c_int32))
            self._nseq[i] = 1
            self._seq_store[i] = seq
        self._logits = (ctypes.c_int8 * capacity)()
        self.embd = np.zeros((capacity, n_embd), dtype=np.float32) if n_embd else None
        # numpy views over the ctypes arrays, for filling a whole batch without a Python loop
        self.tok_np = np.ctypeslib.as_array(self._tok)
        self.pos_np = np.ctypeslib.as_array(self._pos)
        self.logits_np = np.ctypeslib.as_array(self._logits)
        self.batch = _ll.llama_batch()
        # [type: ignore] llama-cpp-python annotates these fields with other ctypes types than the ones it takes
        self.batch.token = self._tok
        self.batch.pos = self._pos  # type: ignore[assignment]
        self.batch.n_seq_id = self._nseq  # type: ignore[assignment]
        self.batch.seq_id = self._seq  # type: ignore[assignment]
        self.batch.logits = self._logits
        if self.embd is not None:
            self.batch.embd = self.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))  # type: ignore[assignment]
        self.n = 0

    def clear(self) -> None:
        self.n = 0

    @property
    def n_outputs(self) -> int:
        return int(np.count_nonzero(self.logits_np[:self.n]))

    def fill(self, tokens: np.ndarray | Sequence[int], pos0: int, *, last_logits: bool = False,
             embd: np.ndarray | None = None) -> None:
        """Set the whole batch at once: ``tokens`` at ``pos0..``, logits for the last one only if asked,
        and (MTP batches) one hidden row per token."""
        n = len(tokens)
        if n > self.capacity:
            raise GgufMtpError(f"batch capacity {self.capacity} exceeded")
        self.tok_np[:n] = tokens
        self.pos_np[:n] = np.arange(pos0, pos0 + n)
        self.logits_np[:n] = 0
        if last_logits:
            self.logits_np[n - 1] = 1
        if self.embd is not None and embd is not None:
            self.embd[:n] = embd
        self.n = n

    def add(self, token: int, pos: int, *, logits: bool, embd: np.ndarray | None = None, seq: int | None = None) -> int:
        """Append one token; ``seq`` puts it in another sequence than the batch's own (batches over slots)."""
        i = self.n
        if i >= self.capacity:
            raise GgufMtpError(f"batch capacity {self.capacity} exceeded")
        self._tok[i] = token
        self._pos[i] = pos
        self._logits[i] = 1 if logits else 0
        if seq is not None:
            self._seq_store[i] = seq
        if self.embd is not None and embd is not None:
            self.embd[i] = embd
        self.n = i + 1
        return i


class Attachment(Protocol):
    """Something bound to a context that must let go of it before the context is freed (a sampler chain)."""

    def close(self) -> None: ...


class Context:
    """A llama.cpp context on ``model``. ``mtp=True`` makes an MTP (NextN draft) context."""

    def __init__(self, model: Model, *, n_ctx: int = 512, n_batch: int = 512, n_threads: int | None = None,
                 mtp: bool = False, n_rs_seq: int = 0, embeddings_nextn: bool = False,
                 flash_attn: bool | None = None, n_seq_max: int = 1, kv_unified: bool = False,
                 n_outputs_max: int = 0, n_outputs_per_seq: int = 0) -> None:
        """``n_outputs_max`` / ``n_outputs_per_seq``: logits rows one decode may ask for, in all and per sequence
        (a verify step: draft + 1 per sequence); they also bound the graph a device sampler adds. 0: n_batch."""
        self.model = model
        #: objects bound to this context (sampling.py's chains, by key), closed before it is freed
        self.attached: dict[object, Attachment] = {}
        p = _ll.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = n_batch
        p.n_ubatch = n_batch
        p.n_seq_max = max(1, n_seq_max)
        if n_outputs_max:
            p.n_outputs_max = n_outputs_max
            p.n_outputs_max_per_seq = min(n_outputs_per_seq or n_outputs_max, n_outputs_max)
        # server slots: each sequence gets its own KV stream and recurrent state; with rollback's spare sequences
        # (rollback.SeqStore) all share one stream, so their seq_cp is bookkeeping, not a buffer copy
        p.kv_unified = bool(kv_unified)
        if n_threads:
            p.n_threads = p.n_threads_batch = n_threads
        p.n_rs_seq = n_rs_seq
        if flash_attn is not None:  # None: llama.cpp decides (auto)
            p.flash_attn_type = _ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else _ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        if mtp:
            p.ctx_type = _ll.LLAMA_CONTEXT_TYPE_MTP
        betas = model.yarn_betas()
        if betas:  # both contexts: the MTP block's RoPE must match the trunk's
            p.yarn_beta_fast, p.yarn_beta_slow = betas
        _log.clear()
        self.ptr = _ll.llama_init_from_model(model.ptr, p)
        if self.ptr:
            model._open_contexts += 1
        if _interrupts:
            self.close()
            raise_interrupt()
        if not self.ptr:
            what = "an MTP context" if mtp else "a context"
            raise GgufMtpError(f"{model.path}: llama.cpp could not create {what}: {last_error()}")
        self.n_seq_max = max(1, n_seq_max)
        # what llama.cpp made of the request (n_ctx 0: the model's own length; both may be rounded or clamped)
        self.n_ctx = int(_ll.llama_n_ctx(self.ptr)) or n_ctx
        # tokens one sequence may hold: llama.cpp splits n_ctx between the sequences (rounded to 256)
        self.n_ctx_seq = self.n_ctx if self.n_seq_max == 1 else int(_ll.llama_n_ctx_seq(self.ptr))
        self.n_batch = min(n_batch, int(_ll.llama_n_batch(self.ptr)) or n_batch)
        self.n_outputs_max = n_outputs_max or self.n_batch
        #: outputs one sequence may have in a decode (a device sampler's bound)
        self.n_outputs_per_seq = min(n_outputs_per_seq or self.n_outputs_max, self.n_outputs_max)
        self.mem = _ll.llama_get_memory(self.ptr)
        self._views: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}  # h_rows' and h_row's (_f32_view)
        self._nextn_rows = embeddings_nextn and not mtp
        #: an MTP context's hidden rows are one an output row (``h_row`` takes an output's batch entry)
        self.output_rows = False
        if mtp:  # masked (output rows only) unless the head's graph keeps a row per token (archs.py) and the
            # library does not gather the output rows first (mtp-output-rows)
            arch = model.meta("general.architecture") or ""
            rows_per_token = arch_facts(arch, model.recurrent).mtp_rows_per_token
            self.output_rows = not rows_per_token or patches.mtp_output_rows(arch)
            _ext.llama_set_embeddings_nextn(self.ptr, True, self.output_rows)
        elif embeddings_nextn:
            _ext.llama_set_embeddings_nextn(self.ptr, True, False)

    def set_nextn_rows(self, on: bool) -> None:
        """Target contexts: whether the next decodes return a hidden row per token. Off (prompt chunks the MTP
        context will not see) saves the device-to-host copy of every row, and lets graphs that can (mimo2) skip
        the last layer's rows that are not output; llama.cpp builds a new graph when this changes."""
        if on != self._nextn_rows:
            _ext.llama_set_embeddings_nextn(self.ptr, on, False)
            self._nextn_rows = on

    def decode_batch(self, batch: Batch) -> None:
        batch.batch.n_tokens = batch.n
        # llama.cpp would abort the process (an assert), not fail; no more tokens than that: no count needed
        if batch.n > self.n_outputs_max and batch.n_outputs > self.n_outputs_max:
            raise GgufMtpError(f"{self.model.path}: {batch.n_outputs} outputs in one decode, the context allows "
                               f"{self.n_outputs_max}")
        rc = _ll.llama_decode(self.ptr, batch.batch)
        if _interrupts:
            raise_interrupt()
        if rc != 0:
            raise GgufMtpError(f"{self.model.path}: llama_decode failed with code {rc}: {last_error()}")

    def set_sampler(self, chain: int | None, seq: int = 0) -> bool:
        """Attach a llama.cpp sampler chain to sequence ``seq`` so it runs inside the decode graph (only token ids,
        and probabilities where the chain computes them, come back); None detaches. False: it cannot run there,
        or must not (``Model.host_sampling``): llama.cpp never sees the chain, which then samples on the host."""
        if chain is not None and self.model.host_sampling:
            return False
        return bool(_ll.llama_set_sampler(self.ptr, seq, chain))

    def graphs_reused(self) -> int:
        """How many decodes so far reused the previous decode's compute graph (llama.cpp's counter)."""
        return int(_ll.llama_perf_context(self.ptr).n_reused)

    def set_head(self, offset: int) -> None:
        """Select which of several MTP heads the next decode of this MTP context runs."""
        _ext.llama_set_nextn_layer_offset(self.ptr, offset)

    def set_mtp_chain(self, n_chain: int) -> None:
        """The next decodes of this MTP context chain their last ``n_chain`` rows (0: off): each drafts from the
        row before on the device. Only with the mtp-draft-chain patch (patches.py); see proposer.py."""
        _mtp_chain_fn()(self.ptr, n_chain)

    def keep_sampled_token(self, i: int, slot: int = 0) -> bool:
        """After a decode (not waited for): copy, on the device, the token this context's device sampler picked for
        batch entry ``i`` into its slot ``slot``, for another context's next decode (:meth:`take_tokens_from`). False
        where it cannot (no device-sampled token there): nothing was copied. Only with the device-draft-tokens
        patch (patches.py)."""
        return bool(_device_token_fns()[0](self.ptr, i, slot))

    def take_tokens_from(self, src: Context, rows: Sequence[int]) -> bool:
        """The next decode of this context (that one only) takes the token id of batch entry ``rows[j]`` from
        ``src``'s slot ``j``, on the device; the batch's ids there are placeholders. This context's queue waits for
        ``src``'s copy, the host does not. False where it cannot (nothing kept in ``src`` yet, a device this context
        cannot read): the batch's own ids are used."""
        arr = (ctypes.c_int32 * len(rows))(*rows)
        return bool(_device_token_fns()[1](self.ptr, src.ptr, len(rows), arr))

    def keep_nextn_rows(self, i0: int, n: int, slot0: int = 0) -> bool:
        """After a decode (not waited for) of a context that outputs every token's hidden row: copy, on the device,
        the rows of batch entries ``i0 .. i0 + n - 1`` into its row slots ``slot0 ..``, for an MTP context's next
        decode (:meth:`take_nextn_from`). False where it cannot (several ubatches; a library without it)."""
        fns = _device_feed_fns()
        return fns is not None and bool(fns[0](self.ptr, i0, n, slot0))

    def take_nextn_from(self, src: Context, rows: Sequence[int]) -> bool:
        """The next decode of this MTP context (that one only) takes the hidden-row input of batch entry ``rows[j]``
        from ``src``'s row slot ``j``, on the device; the batch's rows there are placeholders. With
        :meth:`take_tokens_from` both name the same ``src``. False where it cannot."""
        fns = _device_feed_fns()
        arr = (ctypes.c_int32 * len(rows))(*rows)
        return fns is not None and bool(fns[1](self.ptr, src.ptr, len(rows), arr))

    def keep_output_h_row(self, i: int, slot: int = 0) -> bool:
        """After a decode (not waited for) of an MTP context whose hidden rows are one an output row
        (:attr:`output_rows`): copy, on the device, batch entry ``i``'s hidden row into its row slot ``slot``, for its
        own next decode (:meth:`take_nextn_from` with ``src`` itself). False where it cannot (not an output; a
        library without the mtp-self-feed patch)."""
        fns = _self_feed_fns()
        return fns is not None and bool(fns[0](self.ptr, i, slot))

    def kept_tokens(self, n: int, slot0: int = 0) -> list[int] | None:
        """The ids :meth:`keep_sampled_token` left in slots ``slot0 ..``, read to the host (waits for the last keep);
        None where nothing is kept yet or the library lacks the mtp-self-feed patch."""
        fns = _self_feed_fns()
        out = (ctypes.c_int32 * n)()
        if fns is None or n <= 0 or not fns[1](self.ptr, slot0, n, out):
            return None
        return list(out)

    def synchronize(self) -> None:
        _ll.llama_synchronize(self.ptr)

    def seq_rm(self, p0: int, p1: int = -1, seq: int = 0) -> bool:
        """Drop positions [p0, p1) of a sequence (recurrent state rolls back within n_rs_seq)."""
        return bool(_ll.llama_memory_seq_rm(self.mem, seq, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Make ``dst`` share ``src``'s cells in [p0, p1) (recurrent state: the whole state, whatever the range)."""
        _ll.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def n_rs_seq(self) -> int:
        """Recurrent rollback snapshots this context keeps: what was asked, or 0 where llama.cpp has none for the
        arch (it clamps the request rather than failing), so this is the probe for native rollback."""
        return int(_ll.llama_n_rs_seq(self.ptr))

    def state_size(self, flags: int, seq: int = 0) -> int:
        return int(_ll.llama_state_seq_get_size_ext(self.ptr, seq, flags))

    def state_get(self, buf: ctypes.Array[ctypes.c_uint8], flags: int, seq: int = 0) -> int:
        """Save sequence ``seq``'s state (what ``flags`` select) into ``buf``; bytes written, 0 on failure."""
        return int(_ll.llama_state_seq_get_data_ext(self.ptr, buf, len(buf), seq, flags))

    def state_set(self, buf: ctypes.Array[ctypes.c_uint8], n: int, flags: int, seq: int = 0) -> int:
        """Restore sequence ``seq``'s state saved by ``state_get``; bytes read, 0 on failure."""
        return int(_ll.llama_state_seq_set_data_ext(self.ptr, buf, n, seq, flags))

    def clear(self, seq: int | None = None) -> None:
        """Forget everything (``seq`` None or a one-sequence context), or only sequence ``seq``."""
        if seq is None or self.n_seq_max == 1:
            _ll.llama_memory_clear(self.mem, True)
        else:
            _ll.llama_memory_seq_rm(self.mem, seq, -1, -1)

    def pos_max(self, seq: int = 0) -> int:
        return int(_ll.llama_memory_seq_pos_max(self.mem, seq))

    def h_rows(self, n: int) -> np.ndarray:
        """Hidden rows (``n_embd_out`` wide) of the last decode's first ``n`` tokens (view, copy to keep)."""
        addr = _row_address_fns()[0](self.ptr)
        if not addr:
            raise GgufMtpError(f"{self.model.path}: no hidden rows; the context was made without nextn outputs")
        return _f32_view(self._views, addr, (n, self.model.n_embd_out))

    def h_row(self, i: int) -> np.ndarray:
        """The hidden row of batch entry ``i`` of the last decode (a view)."""
        addr = _row_address_fns()[1](self.ptr, i)
        if not addr:
            raise GgufMtpError(f"{self.model.path}: no hidden row {i}")
        return _f32_view(self._views, addr, (self.model.n_embd_out,))

    def logits_view(self, i: int) -> np.ndarray:
        """Logits of output row ``i`` of the last decode, without a copy (valid until the next decode)."""
        ptr = _ll.llama_get_logits_ith(self.ptr, i)
        if not ptr:
            raise GgufMtpError(f"{self.model.path}: no logits for row {i}")
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,))

    def close(self) -> None:
        if getattr(self, "ptr", None):
            for obj in getattr(self, "attached", {}).values():
                obj.close()  # detach before the context goes: llama.cpp keeps the pointer
            _ll.llama_free(self.ptr)
            self.ptr = None
            m = self.model
            m._open_contexts -= 1
            if m._close_pending and m._open_contexts == 0:  # its close() waited for this context
                m._close_pending = False
                m.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
