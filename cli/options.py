"""Options `run` and `serve` share, declared once (names and short forms follow llama.cpp's tools)."""

from __future__ import annotations

from collections.abc import Callable

import typer


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

# pairing and speculation
MTP = typer.Option(None, "--mtp", help="MTP sidecar to pair (default: the model's own head, or <name>-MTP.gguf / "
                                       "mtp-<name>.gguf beside it).")
NO_MTP = typer.Option(False, "--no-mtp", help="Plain decoding, no speculation.")
REQUIRE_MTP = typer.Option(False, "--require-mtp", help="Fail instead of falling back to plain decoding.")
DRAFT_N_MAX = typer.Option("3", "--spec-draft-n-max", "--draft-max", callback=text(16),
                           help="Draft length, or 'auto' to adapt it to measured acceptance and cost (k up to 4; it "
                                "decodes plainly, with no drafts, where that is fastest).")
P_MIN = typer.Option(0.0, "--spec-draft-p-min", "--draft-p-min",
                     help="Stop drafting when the head's top token is less likely than this.")
WARMUP = typer.Option(None, "--warmup/--no-warmup",
                      help="Decode every shape the first answer uses once at load, as llama.cpp's tools do "
                           "(default: when layers are offloaded to a GPU).")
PROMPT_WINDOW = typer.Option(0, "--spec-draft-prompt-window", min=0,
                             help="Give the MTP head only the last N tokens of each prompt (0: all). Bounds the "
                                  "head's share of prompt processing on long prompts; output is unchanged, early "
                                  "drafts may be accepted less often.")

# devices and placement (runtime/placement.py)
N_GPU_LAYERS = typer.Option(0, "--n-gpu-layers", "-ngl", help="Layers to offload to the GPU (CUDA / Vulkan builds).")
DRAFT_GPU_LAYERS = typer.Option(None, "--n-gpu-layers-draft", "-ngld",
                                help="GPU layers for a self-contained sidecar (default: as -ngl; all with "
                                     "--device-draft).")
DEVICE = typer.Option(None, "--device", "-dev", callback=text(),
                      help="Comma-separated devices to offload the target to (none: no offload; default: every GPU "
                           "and RPC device). See --list-devices.")
DEVICE_DRAFT = typer.Option(None, "--device-draft", "-devd", callback=text(),
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
