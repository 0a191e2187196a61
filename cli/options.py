"""Options `run` and `serve` share, declared once (names and short forms follow llama.cpp's tools)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])
#: typer's (vendored) click UsageError: a one-line usage error, without BadParameter's "Invalid value" prefix
_UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def text(max_len: int = 1000) -> Callable[[str | None], str | None]:
    """A callback for a text option: an empty value (``--rpc ''``, easy to get from an unset shell variable) is
    refused rather than read as "not given", and so is one longer than any valid value (its error would quote it)."""

    def check(value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise typer.BadParameter("empty; give a value or leave the option out")
        if len(value) > max_len:
            raise typer.BadParameter(f"{len(value)} characters, longer than any valid value (at most {max_len})")
        return value

    return check


#: ggml type names (q8_0, Q4_K_M, iq2_xxs, same, auto, ...)
TYPE_NAME = text(32)
# convert, extract and quantize: the reduced-vocabulary draft head (gguf_mtp.draft_vocab)
DRAFT_VOCAB = typer.Option(
    None, "--draft-vocab", metavar="N",
    help="Let the drafts propose only N tokens (e.g. 32768): the file names them (metadata only) and a patched "
         "llama.cpp reads N rows of the LM head per draft; the target still verifies over all. Rows: the N "
         "lowest BPE ids (merge order), or the most frequent in --draft-vocab-from. Default: none.")
DRAFT_VOCAB_FROM = typer.Option(
    None, "--draft-vocab-from", callback=text(4096), metavar="FILE",
    help="With --draft-vocab: choose the N tokens by their count in this UTF-8 text file (for a BPE vocabulary in "
         "merge order, an eighth of them still by merge order, so other text keeps its common tokens).")

# pairing and speculation
MTP = typer.Option(None, "--mtp", help="MTP sidecar to pair (default: the model's own head, or <name>-MTP.gguf / "
                                       "mtp-<name>.gguf beside it).")
NO_MTP = typer.Option(False, "--no-mtp", help="Plain decoding, no speculation.")
REQUIRE_MTP = typer.Option(False, "--require-mtp", help="Fail instead of falling back to plain decoding.")
# the default is gguf_mtp.runtime.config.DEFAULT_DRAFT, spelt out: importing the runtime loads llama.cpp
DRAFT_N_MAX = typer.Option("2", "--spec-draft-n-max", "--draft-max", callback=text(16),
                           help="Draft length, or 'auto' to adapt it to measured acceptance and cost (k up to 6, or "
                                "up to N with auto:N; it decodes plainly, with no drafts, where that is fastest).")
P_MIN = typer.Option(0.0, "--spec-draft-p-min", "--draft-p-min",
                     help="Stop drafting when the head's top token is less likely than this.")
WARMUP = typer.Option(None, "--warmup/--no-warmup",
                      help="Decode every shape the first answer uses once at load, as llama.cpp's tools do "
                           "(default: when layers are offloaded to a GPU).")
# run and serve: a draft vocabulary for the session, the file left as it is
SESSION_DRAFT_VOCAB = typer.Option(
    None, "--draft-vocab", metavar="N",
    help="Let the drafts propose only N tokens (e.g. 32768) in this session, without rewriting the file: the head's "
         "file is served to llama.cpp with them (read whole at load, no mmap), and a patched llama.cpp reads N rows "
         "of the LM head per draft; the target still verifies over all. Rows: the N lowest BPE ids (merge order), "
         "or the most frequent in --draft-vocab-from. Replaces a draft vocabulary the file names.")
PROMPT_WINDOW = typer.Option(0, "--spec-draft-prompt-window", min=0,
                             help="Give the MTP head only the last N tokens of each prompt (0: all). Bounds the "
                                  "head's share of prompt processing on long prompts; output is unchanged, early "
                                  "drafts may be accepted less often.")

# devices and placement: their strings are read by device_options.py, placed by runtime/placement.py
N_GPU_LAYERS = typer.Option(0, "--n-gpu-layers", "-ngl", "--gpu-layers",
                            help="Layers to offload to the GPU (CUDA / Vulkan builds).")
DRAFT_GPU_LAYERS = typer.Option(None, "--n-gpu-layers-draft", "-ngld", "--gpu-layers-draft",
                                "--spec-draft-ngl",
                                help="GPU layers for a self-contained sidecar (default: as -ngl; all with "
                                     "--device-draft).")
DEVICE = typer.Option(None, "--device", "-dev", callback=text(),
                      help="Comma-separated devices to offload the target to (none: no offload; default: every GPU "
                           "and RPC device). See --list-devices.")
DEVICE_DRAFT = typer.Option(None, "--device-draft", "-devd", "--spec-draft-device", callback=text(),
                            help="Device(s) for the MTP head. A bundled or head-only head takes one device: its "
                                 "layers and the LM head after them go there, the trunk stays on --device. A "
                                 "self-contained sidecar is placed like its own model (default: as the target).")
SPLIT_MODE = typer.Option("layer", "--split-mode", "-sm", callback=text(16),
                          help="How to split the target across devices: none (one device: --main-gpu), layer (runs "
                               "of layers), row (rows of each matrix), tensor (llama.cpp's experimental tensor "
                               "parallelism).")
TENSOR_SPLIT = typer.Option(None, "--tensor-split", "-ts", callback=text(),
                            help="Proportion of the target per device, e.g. 3,1 (default: by free memory).")
MAIN_GPU = typer.Option(0, "--main-gpu", "-mg",
                        help="The device (index into the device list) for --split-mode none, or for intermediate "
                             "results with row.")
RPC = typer.Option(None, "--rpc", callback=text(1 << 16),
                   help="Comma-separated RPC servers (host:port) whose devices join the device list (before the local "
                        "GPUs). No authentication: trusted networks only.")

# context and threads
BATCH_SIZE = typer.Option(512, "--batch-size", "-b", help="Prompt batch size.")
THREADS = typer.Option(None, "--threads", "-t", help="CPU threads.")


# llama.cpp's spellings of what we have under other names (llama-cli, llama-completion, llama-server)
MODEL = typer.Option(None, "--model", "-m", help="The GGUF model, as llama.cpp's -m (or give it as the argument).")
MODEL_DRAFT = typer.Option(None, "--model-draft", "-md", "--spec-draft-model",
                           help="llama.cpp's spelling of --mtp: the MTP sidecar to pair.")
SPEC_TYPE = typer.Option(None, "--spec-type", callback=text(64),
                         help="draft-mtp (the default: the MTP head drafts) or none (as --no-mtp); llama.cpp's other "
                              "speculative types are not supported.")
FLASH_ATTN = typer.Option(None, "--flash-attn", "-fa", callback=text(16),
                          help="Flash attention: on, off or auto (llama.cpp decides; the default).")


def model_path(argument: Path | None, option: Path | None) -> Path | None:
    """The model, from the argument or from -m/--model (both given: an error, even when they agree)."""
    if argument is not None and option is not None:
        raise typer.BadParameter(f"the model is given twice ({argument} as the argument, {option} with -m/--model); "
                                 "give it once")
    return option if option is not None else argument


def sidecar(mtp: Path | None, model_draft: Path | None) -> Path | None:
    """The MTP sidecar, from --mtp or llama.cpp's -md/--model-draft."""
    if mtp is not None and model_draft is not None:
        raise typer.BadParameter("--mtp and -md/--model-draft both name the sidecar; give one")
    return mtp if mtp is not None else model_draft


#: the speculative types llama.cpp's --spec-type knows; we do draft-mtp and none
SPEC_TYPES_LLAMA = ("draft-simple", "draft-eagle3", "draft-mtp", "ngram-simple", "ngram-map-k", "ngram-map-k4v",
                    "ngram-mod", "ngram-cache")


def no_mtp_from_spec_type(value: str | None, no_mtp: bool) -> bool:
    """--spec-type: draft-mtp keeps MTP on, none turns it off (as --no-mtp); anything else is refused."""
    if value is None:
        return no_mtp
    types = [t.strip() for t in value.split(",") if t.strip()]
    other = [t for t in types if t not in ("draft-mtp", "none")]
    if other:
        known = other[0] in SPEC_TYPES_LLAMA
        raise typer.BadParameter(f"--spec-type {other[0]}: " + ("llama.cpp's, " if known else "unknown; ")
                                 + "gguf-mtp supports draft-mtp (the MTP head, the default) and none (plain decoding)")
    if "none" in types and "draft-mtp" in types:
        raise typer.BadParameter("--spec-type: draft-mtp and none exclude each other")
    if "none" in types:
        return True
    if no_mtp:
        raise typer.BadParameter("--spec-type draft-mtp and --no-mtp exclude each other")
    return False


def flash_attn(value: str | None) -> bool | None:
    """-fa on|off|auto as llama.cpp reads it (also enabled/disabled, true/false, 1/0, -1): True, False, None."""
    if value is None:
        return None
    v = value.lower()
    if v in ("on", "enabled", "true", "1"):
        return True
    if v in ("off", "disabled", "false", "0"):
        return False
    if v in ("auto", "-1"):
        return None
    raise typer.BadParameter(f"-fa/--flash-attn {value!r}: on, off or auto")


def n_predict(value: int, option: str = "-n/--n-predict") -> int:
    """-n as llama.cpp reads it: N tokens, -1 no limit, -2 until the context is full (for us both end there, as
    gguf-mtp never shifts the context); returned as N, or -1 for no limit."""
    if value < -2:
        raise typer.BadParameter(f"{option} {value}: a token count, -1 (no limit) or -2 (until the context is full)")
    return -1 if value < 0 else value


# llama.cpp options we do not have, refused with what to do instead (not click's bare "No such option").
# Each row: spellings, whether it takes a value, the commands it concerns, the advice.
_BOTH = ("run", "serve")
UNSUPPORTED: tuple[tuple[tuple[str, ...], bool, tuple[str, ...], str], ...] = (
    (("--mlock",), False, _BOTH, "the model is memory-mapped, as llama.cpp does by default; leave it out"),
    (("--no-mmap",), False, _BOTH, "the model is memory-mapped, as llama.cpp does by default; leave it out"),
    (("-lm", "--load-mode"), True, _BOTH, "the model is memory-mapped, as llama.cpp does by default; leave it out"),
    (("-cnv", "--conversation"), False, ("run",), "run chats whenever no -p/-f prompt is given; leave it out"),
    (("-no-cnv", "--no-conversation"), False, ("run",), "give the prompt with -p or -f for one completion"),
    (("-i", "--interactive"), False, ("run",), "run chats whenever no -p/-f prompt is given; leave it out"),
    (("-if", "--interactive-first"), False, ("run",), "run chats whenever no -p/-f prompt is given; leave it out"),
    (("-st", "--single-turn"), False, ("run",), "give the prompt with -p for one completion"),
    (("--grammar",), True, _BOTH, "constrained output (grammars, JSON schemas) is not supported"),
    (("--grammar-file",), True, _BOTH, "constrained output (grammars, JSON schemas) is not supported"),
    (("-j", "--json-schema"), True, _BOTH, "constrained output (grammars, JSON schemas) is not supported"),
    (("-jf", "--json-schema-file"), True, _BOTH, "constrained output (grammars, JSON schemas) is not supported"),
    (("--mirostat",), True, _BOTH, "sample with --temp, --top-k, --top-p and --min-p"),
    (("--mirostat-lr",), True, _BOTH, "sample with --temp, --top-k, --top-p and --min-p"),
    (("--mirostat-ent",), True, _BOTH, "sample with --temp, --top-k, --top-p and --min-p"),
    (("--top-nsigma",), True, _BOTH, "sample with --temp, --top-k, --top-p and --min-p"),
    (("--xtc-probability",), True, _BOTH, "sample with --temp, --top-k, --top-p and --min-p"),
    (("--xtc-threshold",), True, _BOTH, "sample with --temp, --top-k, --top-p and --min-p"),
    (("--dynatemp-range",), True, _BOTH, "sample with --temp, --top-k, --top-p and --min-p"),
    (("--dynatemp-exp",), True, _BOTH, "sample with --temp, --top-k, --top-p and --min-p"),
    (("--dry-multiplier",), True, _BOTH, "use --repeat-penalty, --presence-penalty or --frequency-penalty"),
    (("--dry-base",), True, _BOTH, "use --repeat-penalty, --presence-penalty or --frequency-penalty"),
    (("--dry-allowed-length",), True, _BOTH, "use --repeat-penalty, --presence-penalty or --frequency-penalty"),
    (("--dry-penalty-last-n",), True, _BOTH, "use --repeat-penalty, --presence-penalty or --frequency-penalty"),
    (("--samplers",), True, _BOTH, "the order is llama.cpp's default (penalties, top-k, top-p, min-p, temperature)"),
    (("--sampling-seq", "--sampler-seq"), True, _BOTH,
     "the order is llama.cpp's default (penalties, top-k, top-p, min-p, temperature)"),
    (("-l", "--logit-bias"), True, _BOTH, "logit biases are not supported"),
    (("-ctk", "--cache-type-k"), True, _BOTH, "the KV cache is F16 (llama.cpp's default); leave it out"),
    (("-ctv", "--cache-type-v"), True, _BOTH, "the KV cache is F16 (llama.cpp's default); leave it out"),
    (("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"), True, _BOTH,
     "the KV cache is F16 (llama.cpp's default); leave it out"),
    (("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"), True, _BOTH,
     "the KV cache is F16 (llama.cpp's default); leave it out"),
    (("-td", "--threads-draft", "--spec-draft-threads"), True, _BOTH, "the MTP head runs with -t/--threads"),
    (("-nkvo", "--no-kv-offload"), False, _BOTH, "the KV cache follows the layers (-ngl); leave it out"),
    (("--lora",), True, _BOTH, "merge the adapter into the checkpoint before converting it"),
    (("--lora-scaled",), True, _BOTH, "merge the adapter into the checkpoint before converting it"),
    (("--control-vector",), True, _BOTH, "control vectors are not supported"),
    (("--mmproj",), True, _BOTH, "multimodal models are not supported (text only)"),
    (("--keep",), True, _BOTH, "the context is never shifted: raise -c/--ctx-size"),
    (("--context-shift",), False, _BOTH, "the context is never shifted: raise -c/--ctx-size"),
    (("-ub", "--ubatch-size"), True, _BOTH, "-b/--batch-size sets both batch sizes"),
    (("-ot", "--override-tensor"), True, _BOTH, "place layers with -ngl, --device, --split-mode and --tensor-split"),
    (("-cmoe", "--cpu-moe"), False, _BOTH, "place layers with -ngl, --device, --split-mode and --tensor-split"),
    (("-ncmoe", "--n-cpu-moe"), True, _BOTH, "place layers with -ngl, --device, --split-mode and --tensor-split"),
    (("--numa",), True, _BOTH, "NUMA placement is not supported; use --threads"),
    (("--rope-scaling",), True, _BOTH, "the model's own RoPE settings are used (convert with a longer context)"),
    (("--rope-scale",), True, _BOTH, "the model's own RoPE settings are used (convert with a longer context)"),
    (("--rope-freq-base",), True, _BOTH, "the model's own RoPE settings are used (convert with a longer context)"),
    (("--spec-draft-n-min", "--draft-min"), True, _BOTH,
     "drafts stop early with --spec-draft-p-min, or use --spec-draft-n-max auto"),
    (("--spec-draft-ctx-size", "-cd", "--ctx-size-draft"), True, _BOTH,
     "the MTP head shares the target's context (-c)"),
    (("--slot-save-path",), True, ("serve",), "slots cannot be saved; the prefix cache reuses a shared prompt"),
    (("--cache-reuse",), True, ("serve",), "each slot reuses the prompt prefix it shares with its last request"),
)
#: llama.cpp options that ask for what gguf-mtp always does: accepted, and nothing changes
ALWAYS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("--jinja",), _BOTH),  # the chat template is always rendered with Jinja
    (("--metrics",), ("serve",)),  # /metrics is always served
    (("-cb", "--cont-batching"), ("serve",)),  # slots are always batched together
)


def _refuse(names: tuple[str, ...], command: str, advice: str) -> Callable[[object], object]:
    def check(value: object) -> object:
        if value not in (None, False):
            raise _UsageError(f"{'/'.join(names)} (llama.cpp's) is not supported by gguf-mtp {command}: "
                                   f"{advice}")
        return value

    return check


def _help(ctx: typer.Context, value: bool) -> None:
    if value:
        typer.echo(ctx.get_help())
        raise typer.Exit()


def llamacpp_options(command: str) -> Callable[[F], F]:
    """Add to a command the llama.cpp options it refuses (:data:`UNSUPPORTED`), the ones it accepts and ignores
    (:data:`ALWAYS`) and ``-h``, all hidden from its help: the command's function never sees them."""

    def wrap(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        extra = [inspect.Parameter("llamacpp_help", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                   default=typer.Option(False, "-h", hidden=True, is_eager=True, callback=_help))]
        for i, (names, takes, where, advice) in enumerate(UNSUPPORTED):
            if command in where:
                extra.append(inspect.Parameter(
                    f"llamacpp_unsupported_{i}", inspect.Parameter.KEYWORD_ONLY,
                    annotation=str | None if takes else bool,
                    default=typer.Option(None if takes else False, *names, hidden=True, is_eager=True,
                                         callback=_refuse(names, command, advice))))
        for i, (names, where) in enumerate(ALWAYS):
            if command in where:
                extra.append(inspect.Parameter(f"llamacpp_always_{i}", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                               default=typer.Option(False, *names, hidden=True)))

        @functools.wraps(func)
        def command_with_llamacpp_options(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **{k: v for k, v in kwargs.items() if not k.startswith("llamacpp_")})

        params = list(sig.parameters.values()) + extra
        command_with_llamacpp_options.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command_with_llamacpp_options.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return command_with_llamacpp_options  # type: ignore[return-value]

    return wrap
