"""The session and sampling options of ``run`` and ``serve``, declared once, and the one function that turns them
into a :class:`~gguf_mtp.runtime.SessionConfig` (names, short forms and meanings follow llama.cpp's tools).

Where the two commands differ (``serve``'s sampling options are defaults for requests, ``run``'s apply to its
answers), the option is declared by a function taking the default and the help text; the spellings stay here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from . import options

if TYPE_CHECKING:  # imported where used at run time: the runtime loads llama.cpp (see gguf_mtp.runtime)
    from gguf_mtp.runtime import SamplerConfig, SessionConfig


def list_devices(value: bool) -> None:
    """Eager --list-devices for commands without --rpc (serve)."""
    if value:
        from gguf_mtp.runtime import devices

        typer.echo(devices.listing())
        raise typer.Exit()


# sampling (llama.cpp's names, defaults and order: penalties, top-k, typical, top-p, min-p, temperature)
def temp(default: float, help: str) -> Any:
    return typer.Option(default, "--temp", "--temperature", help=help)


def top_k(help: str | None = None) -> Any:
    return typer.Option(40, "--top-k", help=help)


def top_p(help: str | None = None) -> Any:
    return typer.Option(0.95, "--top-p", help=help)


def seed(default: int, help: str | None = None) -> Any:
    return typer.Option(default, "--seed", "-s", help=help)


MIN_P = typer.Option(0.0, "--min-p", help="Drop tokens less likely than this times the most likely one (0: off).")
TYPICAL = typer.Option(1.0, "--typical", "--typical-p", help="Locally typical sampling, parameter p (1: off).")
REPEAT_PENALTY = typer.Option(1.0, "--repeat-penalty",
                              help="Penalise tokens of the last --repeat-last-n (prompt included) (1: off).")
REPEAT_LAST_N = typer.Option(64, "--repeat-last-n",
                             help="Tokens the penalties look back over (0: penalties off, -1: the whole context).")
PRESENCE_PENALTY = typer.Option(0.0, "--presence-penalty", help="Subtract this from tokens seen (0: off).")
FREQUENCY_PENALTY = typer.Option(0.0, "--frequency-penalty", help="Subtract this times each token's count (0: off).")
IGNORE_EOS = typer.Option(False, "--ignore-eos", help="Never end at an end-of-generation token (generate until -n).")


# context and generation length
def ctx_size(help: str) -> Any:
    return typer.Option(4096, "--ctx-size", "-c", help=help)


def n_predict(default: int, help: str) -> Any:
    return typer.Option(default, "--n-predict", "--predict", "-n", help=help)


def draft_n(value: str) -> tuple[int, bool]:
    """--spec-draft-n-max: (draft length, adaptive). ``auto`` adapts it up to ``AUTO_DRAFT_MAX``, ``auto:N`` up to N.

    >>> draft_n("3"), draft_n("auto:6")
    ((3, False), (6, True))
    """
    from gguf_mtp.runtime.config import AUTO_DRAFT_MAX
    from gguf_mtp.runtime.options import MAX_DRAFT

    text = value.strip().lower()
    if text == "auto":
        return AUTO_DRAFT_MAX, True
    adaptive = text.startswith("auto:")
    try:
        n = int(text[len("auto:"):] if adaptive else text)
    except ValueError:
        raise typer.BadParameter(f"--spec-draft-n-max {value!r}: a number (1-{MAX_DRAFT}), 'auto' or 'auto:N' "
                                 f"(adapt up to N)") from None
    if not 1 <= n <= MAX_DRAFT:
        raise typer.BadParameter(f"--spec-draft-n-max must be between 1 and {MAX_DRAFT}"
                                 + (f" (auto:{n})" if adaptive else ""))
    return n, adaptive


def session_config(*, draft_n_max: str, p_min: float, prompt_window: int, warmup: bool | None, require_mtp: bool,
                   n_gpu_layers: int, draft_gpu_layers: int | None, device: str | None, device_draft: str | None,
                   split_mode: str, tensor_split: str | None, main_gpu: int, rpc: str | None, ctx_size: int,
                   batch_size: int, threads: int | None, flash_attn: str | None, n_parallel: int = 1,
                   timings: bool | None = None, draft_vocab: int | None = None,
                   draft_vocab_from: str | None = None) -> SessionConfig:
    """The session the options of ``run`` or ``serve`` ask for. Option strings are parsed here (a malformed one is
    a usage error); the values are checked by the runtime (``check_session``) when the session is made."""
    from gguf_mtp.runtime import SessionConfig

    from . import device_options

    k, adaptive = draft_n(draft_n_max)
    return SessionConfig(
        n_draft=k, adaptive=adaptive, p_min=p_min, n_ctx=ctx_size, n_batch=batch_size, n_threads=threads,
        n_gpu_layers=n_gpu_layers, draft_gpu_layers=draft_gpu_layers, require_mtp=require_mtp,
        prompt_window=prompt_window, warmup=warmup, n_parallel=n_parallel, timings=timings,
        devices=device_options.device_list(device) if device is not None else None,
        draft_devices=device_options.device_list(device_draft, "--device-draft") if device_draft is not None else None,
        split_mode=split_mode, tensor_split=device_options.tensor_split(tensor_split) if tensor_split else None,
        main_gpu=main_gpu, rpc=device_options.endpoints(rpc) if rpc is not None else None,
        flash_attn=options.flash_attn(flash_attn), draft_vocab=draft_vocab, draft_vocab_from=draft_vocab_from)


def sampler_config(*, temp: float, top_k: int, top_p: float, seed: int, min_p: float, typical_p: float,
                   repeat_penalty: float, repeat_last_n: int, presence_penalty: float, frequency_penalty: float,
                   ignore_eos: bool = False) -> SamplerConfig:
    """The sampling the options ask for (unchecked: ``check_sampling`` refuses or clamps it)."""
    from gguf_mtp.runtime import SamplerConfig

    return SamplerConfig(temp=temp, top_k=top_k, top_p=top_p, seed=seed, min_p=min_p, typical_p=typical_p,
                         repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                         presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                         ignore_eos=ignore_eos)
