"""Which of gguf-mtp's llama.cpp patches (``patches/llama.cpp`` in the repository, applied by ``scripts/setup.sh``)
the loaded libllama carries. Each patch exports an empty C function as its marker; whether ``dlsym`` finds it is
the test, so the library itself tells a stock wheel, a patched one and a ``LLAMA_CPP_LIB_PATH`` build apart, and
every feature a patch enables falls back to the stock path where its marker is missing."""

from __future__ import annotations

import ctypes
import functools
import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Patch:
    """One patch: its name (the patch file's, without the number), its marker symbol, what it grants."""

    name: str
    marker: str
    #: archs whose recurrent state the patched llama.cpp snapshots for rollback (``llm_arch_supports_rs_rollback``)
    rs_rollback_archs: frozenset[str] = frozenset()
    #: archs whose MTP graph can chain a step's drafts in one decode (``llama_set_mtp_chain``)
    chain_archs: frozenset[str] = frozenset()
    #: archs whose MTP graph reads a draft vocabulary (``gguf_mtp.draft_vocab``)
    draft_vocab_archs: frozenset[str] = frozenset()
    #: archs whose MTP graph takes its token ids and hidden rows from another context's device tensors
    feed_archs: frozenset[str] = frozenset()
    #: archs whose MTP graph runs its block past the attention on the output rows alone when its hidden rows are
    #: masked (one an output row): the runtime then asks for them masked
    output_rows_archs: frozenset[str] = frozenset()
    #: the environment variable that switches the patch on (read by ggml; the patch leaves it off so that llama.cpp's
    #: own tools built from the same source behave as stock unless it is set): set by :func:`enable_switches`
    switch: str = ""
    #: the value :func:`enable_switches` gives ``switch`` (a patch with a mode past on: sched-async-inputs' 2)
    switch_value: str = "1"
    #: the ggml back-end (its registry's name) whose library alone holds the change and the marker, as ``CUDA``;
    #: empty where every build has them. A library built without that back-end lacks the marker, whatever was applied
    backend: str = ""


#: mtp-output-rows' switch (``Patch.switch``), read by llama.cpp whenever it builds an MTP graph
OUTPUT_ROWS_ENV = "GGUF_MTP_MTP_OUTPUT_ROWS"

#: every patch gguf-mtp knows, shipped (patches/llama.cpp) or still to be measured (patches/llama.cpp/proposed,
#: applied by GGUF_MTP_PATCHES=proposed), in number order; tests/test_patches.py checks the files against it
KNOWN: tuple[Patch, ...] = (
    Patch("qwen3next-rs-rollback", "gguf_mtp_patch_qwen3next_rs_rollback", rs_rollback_archs=frozenset({"qwen3next"})),
    Patch("draft-vocab", "gguf_mtp_patch_draft_vocab", draft_vocab_archs=frozenset({"qwen35", "qwen35moe"})),
    # narrow rows share a block in ggml-cuda's non-contiguous concat (a verify's DeltaNet conv windows)
    Patch("cuda-concat-narrow-rows", "gguf_mtp_patch_cuda_concat_narrow_rows", switch="GGML_CUDA_CONCAT_NARROW_ROWS",
          backend="CUDA"),
    # fewer copy kernels a decode shorter than n_rs_seq + 1; always on (GGUF_MTP_CONV_SNAPSHOTS=all: every copy)
    Patch("delta-net-conv-snapshots", "gguf_mtp_patch_delta_net_conv_snapshots"),
    # a split's user inputs as one batch of asynchronous copies; 2: waited for after the split's launch (a library
    # from before that revision reads 2 as 1)
    Patch("sched-async-inputs", "gguf_mtp_patch_sched_async_inputs", switch="GGML_SCHED_ASYNC_INPUTS",
          switch_value="2"),
    # a verify takes its last draft's token id on the device (llama_keep_sampled_token, llama_set_tokens_from), and
    # the head's decode its ids and hidden rows (llama_keep_nextn_rows, llama_set_nextn_from: feed_archs); the
    # marker names the revision whose lookup is a gather (the first one's in-place write broke a split between the
    # embedding's backend and the layers', as over RPC), so a library of the first one counts as without the patch
    Patch("device-draft-tokens", "gguf_mtp_patch_device_draft_tokens_2", feed_archs=frozenset({"qwen35", "qwen35moe"})),
    # ggml-cuda's argmax (a backend sampler's greedy pick) over a few long rows split across blocks; CUDA builds only
    Patch("cuda-argmax-split", "gguf_mtp_patch_cuda_argmax_split", switch="GGML_CUDA_ARGMAX_SPLIT", backend="CUDA"),
    # consecutive quantized mat-vecs of one activation quantize it once; CUDA builds only
    Patch("cuda-mmvq-share-q8-1", "gguf_mtp_patch_cuda_mmvq_share_q8_1", switch="GGML_CUDA_MMVQ_SHARE_Q8_1",
          backend="CUDA"),
    # the head's block past the attention on the output rows alone (padding and fed rows only write K and V)
    Patch("mtp-output-rows", "gguf_mtp_patch_mtp_output_rows", output_rows_archs=frozenset({"qwen35", "qwen35moe"}),
          switch=OUTPUT_ROWS_ENV),
    Patch("mtp-draft-chain", "gguf_mtp_patch_mtp_draft_chain", chain_archs=frozenset({"qwen35", "qwen35moe"})),
    # a row whose token a backend sampler picked copies only that id to the host (not its whole logits row)
    Patch("sampled-ids-only", "gguf_mtp_patch_sampled_ids_only", switch="GGUF_MTP_SAMPLED_IDS_ONLY"),
    # an MTP context's next draft from its own last one on the device (its masked hidden row and token kept in its
    # slots), and kept ids read back: a prototype (proposed)
    Patch("mtp-self-feed", "gguf_mtp_patch_mtp_self_feed"),
    # ggml-cuda's Q8_0 and Q4_0 mat-vecs of 1 to 8 columns read longer runs of a block a thread as aligned words,
    # each row once for every column, more rows a block; CUDA builds only
    Patch("cuda-mmvq-aligned", "gguf_mtp_patch_cuda_mmvq_aligned", switch="GGML_CUDA_MMVQ_ALIGNED", backend="CUDA"),
)


#: sched-async-inputs' switch (``Patch.switch``)
ASYNC_INPUTS_ENV = "GGML_SCHED_ASYNC_INPUTS"


_set_here: set[str] = set()  # the switches enable_switches set (the environment did not name them)


def enable_switches() -> list[str]:
    """Switch on (at ``Patch.switch_value``), for the contexts this process makes, every loaded patch that waits for
    an environment variable, unless the environment already says (``=0`` keeps the stock path: an A/B on one build).
    Call before any context is made: ggml reads them then. Returns the variables that are on."""
    on = []
    for p in loaded():
        if not p.switch:
            continue
        if p.switch not in os.environ:
            os.environ[p.switch] = p.switch_value
            _set_here.add(p.switch)
        if os.environ[p.switch] not in ("", "0"):
            on.append(p.switch)
    return on


def switched_on_here() -> frozenset[str]:
    """The variables :func:`enable_switches` set in this process's environment, which child processes inherit: a
    program that also starts llama.cpp's own tools leaves them out of theirs to run them as stock
    (``bench.llamacpp.tool_env``)."""
    return frozenset(_set_here)


def _has_symbol(lib: ctypes.CDLL, name: str) -> bool:
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True


@functools.cache
def loaded() -> tuple[Patch, ...]:
    """The patches the libllama that llama-cpp-python loaded carries (a process loads one library: cached)."""
    import llama_cpp.llama_cpp as ll

    # an own handle on the same file (dlopen returns the loaded one): lookups do not add attributes to theirs
    lib = ctypes.CDLL(ll._lib._name)
    return tuple(p for p in KNOWN if _has_symbol(lib, p.marker))


def names() -> list[str]:
    """The loaded library's patches by name."""
    return [p.name for p in loaded()]


def rs_rollback_archs() -> frozenset[str]:
    """Archs the loaded library keeps recurrent-state rollback snapshots for beyond stock llama.cpp's list."""
    return frozenset().union(*(p.rs_rollback_archs for p in loaded()))


def startup_line() -> str:
    """One line for start-up, beside the ``devices:`` line: ``llama.cpp patches: qwen3next-rs-rollback``."""
    return "llama.cpp patches: " + (", ".join(names()) or "none (stock)")


def draft_vocab_note(*paths: str | os.PathLike[str] | None) -> str | None:
    """A note for start-up when a model file names a draft vocabulary (``gguf_mtp.draft_vocab``) that the loaded
    library cannot use (no ``draft-vocab`` patch): the drafts then read the full LM head. None otherwise."""
    from ..draft_vocab import KEY
    from ..ggufio.reader import GGUFFile

    if "draft-vocab" in names():
        return None
    for p in paths:
        if p is None:
            continue
        try:
            has = KEY in GGUFFile(p).kv
        except Exception:  # noqa: BLE001 - the loader reports a bad file; this note is only a hint
            continue
        if has:
            return (f"{p} names a draft vocabulary ({KEY}), which this llama.cpp build does not use (no draft-vocab "
                    "patch): the drafts read the full LM head; `bash scripts/setup.sh` builds the patched library")
    return None


#: a vocabulary from which a draft vocabulary is worth suggesting: the LM head is then most of what a draft reads
SUGGEST_DRAFT_VOCAB_ABOVE = 65536


def draft_vocab_archs() -> frozenset[str]:
    """Archs whose MTP graph reads a draft vocabulary in the loaded library (none in a stock one)."""
    return frozenset().union(*(p.draft_vocab_archs for p in loaded()))


def draft_vocab_hint(arch: str, n_vocab: int, has_map: bool) -> str | None:
    """A start-up hint where the loaded library could draft from a reduced vocabulary and this session's head has
    none: ``--draft-vocab 32768``, measured at about a third of a draft's time on the release shapes
    (docs/benchmarks.md). None where it does not apply."""
    if has_map or n_vocab <= SUGGEST_DRAFT_VOCAB_ABOVE or arch not in draft_vocab_archs():
        return None
    return (f"each draft reads all {n_vocab:,} rows of the LM head; --draft-vocab 32768 makes it read 32,768 (a "
            "third of a draft's time on a GPU; the file is left as it is), or write it into the file with "
            "`gguf-mtp extract --draft-vocab`")


#: GGUF_MTP_DRAFT_CHAIN=0 keeps one decode per draft where the library could chain them (A/B on one build)
CHAIN_ENV = "GGUF_MTP_DRAFT_CHAIN"


def chains_drafts(arch: str) -> bool:
    """Whether the loaded library drafts a step's tokens in one decode of ``arch``'s MTP graph (and the
    environment does not switch it off)."""
    if os.environ.get(CHAIN_ENV, "1") == "0":
        return False
    return any(arch in p.chain_archs for p in loaded())


#: GGUF_MTP_DEVICE_TOKENS=0 reads every draft back before the verify where the library could leave the last one on
#: the device (A/B on one build)
DEVICE_TOKENS_ENV = "GGUF_MTP_DEVICE_TOKENS"
#: GGUF_MTP_DEVICE_FEED=1: the head's next decode queued behind the verify, fed from the verify's rows on the device
#: (off by default: slower on a GPU, docs/upstream/device-draft-tokens.md)
DEVICE_FEED_ENV = "GGUF_MTP_DEVICE_FEED"


def device_tokens() -> bool:
    """Whether a verify may take its last draft's token id on the device, straight from the MTP context's sampler
    (the device-draft-tokens patch, and the environment does not switch it off): the host does not wait for that
    draft before it starts the verify."""
    if os.environ.get(DEVICE_TOKENS_ENV, "1") == "0":
        return False
    return "device-draft-tokens" in names()


def device_feed(arch: str) -> bool:
    """Whether the head of an ``arch`` model may decode right behind the verify, its inputs the verify's rows taken
    on the device (``GGUF_MTP_DEVICE_FEED=1``; off by default, as it measured slower on a GPU), where the verify may
    take its last draft there too (:func:`device_tokens`). The library must also have the functions
    (``llama.has_device_feed``)."""
    return (os.environ.get(DEVICE_FEED_ENV, "0") == "1" and device_tokens()
            and any(arch in p.feed_archs for p in loaded()))


#: GGUF_MTP_SELF_FEED=1: each draft after a step's first decoded from the one before on the device (the proposed
#: mtp-self-feed patch; off by default until measured on a GPU)
SELF_FEED_ENV = "GGUF_MTP_SELF_FEED"


def self_feed() -> bool:
    """Whether the head may decode a step's next draft from its last one's token and hidden row kept on the device,
    without the host reading them first (``GGUF_MTP_SELF_FEED=1``, the proposed mtp-self-feed patch, and the verify
    taking drafts there: :func:`device_tokens`). The head's hidden rows must also be masked (one an output row:
    ``Context.output_rows``), which the proposer checks."""
    return os.environ.get(SELF_FEED_ENV, "0") == "1" and device_tokens() and "mtp-self-feed" in names()


def mtp_output_rows(arch: str) -> bool:
    """Whether the loaded library runs an ``arch`` head's block past the attention on the output rows alone (the
    mtp-output-rows patch, its switch on: :func:`enable_switches` sets it unless the environment says ``=0``), so
    that the head's hidden rows are asked for masked, one an output row. Not where the head's drafts are chained
    (:func:`chains_drafts`): a chained graph returns every row's."""
    return (switch_value(OUTPUT_ROWS_ENV) != 0 and not chains_drafts(arch)
            and any(arch in p.output_rows_archs for p in loaded()))


def switch_value(name: str) -> int:
    """A switch as the patched library reads it, C's ``atoi``: the leading integer of the value (after blanks and a
    sign), 0 when there is none (``yes``, ``on``) or the variable is unset. The head's graph and the runtime must
    agree on mtp-output-rows, or the head's hidden rows are read at the wrong rows.

    >>> os.environ["GGUF_MTP_MTP_OUTPUT_ROWS"] = " 1x"; switch_value("GGUF_MTP_MTP_OUTPUT_ROWS")  # doctest: +SKIP
    1
    """
    m = re.match(r"\s*([+-]?\d+)", os.environ.get(name, ""))
    return int(m.group(1)) if m else 0
