"""``gguf-mtp run``: speculative completion (-p) or interactive chat with the MTP head."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import typer

from gguf_mtp.errors import GgufMtpError
from gguf_mtp.files import describe_os_error, open_input
from gguf_mtp.ggufio.atomic import check_output, write_bytes
from gguf_mtp.server.text import is_utf8

from . import device_options, options, session_options

if TYPE_CHECKING:  # at run time they are imported in run(), after llama.cpp (see gguf_mtp.runtime)
    from gguf_mtp.runtime import Generation, MTPSession, SamplerConfig


def _prompt(value: str | None) -> str | None:
    """-p/--prompt: not empty (there would be nothing to complete; without -p, run chats)."""
    if value == "":
        raise typer.BadParameter("empty; give the text to complete, or leave -p out to chat")
    return value


def _texts(values: list[str] | None) -> list[str] | None:
    """-r/--reverse-prompt: each non-empty (an empty one would stop at once)."""
    for v in values or []:
        if not v:
            raise typer.BadParameter("empty; give the text to stop at")
        if len(v) > 1000:
            raise typer.BadParameter(f"{len(v)} characters; a stop text has at most 1000")
    return values


def _ended(g: Generation, session: MTPSession, err: Callable[[str], None]) -> None:
    """The statistics line after an answer, with why it ended where that is not the usual."""
    if g.stopped == "context":
        err(f"note: the context is full ({session.engine.n_ctx} tokens): generation ended there (gguf-mtp does not "
            "shift the context; raise -c/--ctx-size for more)")
    err(("[interrupted] " if g.stopped == "interrupted" else "") + g.stats.compact())


@options.llamacpp_options("run")
def run(
    model_arg: Path | None = typer.Argument(None, metavar="MODEL",
                                            help="GGUF model (bundled, or trunk with a sidecar beside it)."),
    model_opt: Path | None = options.MODEL,
    list_devices: bool = typer.Option(False, "--list-devices",
                                      help="Print the devices this llama.cpp build can use (with --rpc: the servers' "
                                           "too) and exit."),
    mtp_opt: Path | None = options.MTP,
    model_draft: Path | None = options.MODEL_DRAFT,
    no_mtp_opt: bool = options.NO_MTP,
    spec_type: str | None = options.SPEC_TYPE,
    require_mtp: bool = options.REQUIRE_MTP,
    prompt: str | None = typer.Option(None, "--prompt", "-p", callback=_prompt,
                                      help="One-shot completion of this text (no chat template)."),
    prompt_file: Path | None = typer.Option(None, "--file", "-f", help="One-shot completion of the text in this file."),
    n_predict: int = session_options.n_predict(256, "Tokens to generate (per answer in chat); -1 or -2: until the "
                                                    "end of the text or a full context."),
    reverse_prompt: list[str] | None = typer.Option(None, "--reverse-prompt", "-r", callback=_texts,
                                                    help="Stop when the text ends with this (repeatable)."),
    system: str | None = typer.Option(None, "--system", "-sys", "--system-prompt", help="System message for chat."),
    draft_n_max: str = options.DRAFT_N_MAX,
    p_min: float = options.P_MIN,
    prompt_window: int = options.PROMPT_WINDOW,
    draft_vocab: int | None = options.SESSION_DRAFT_VOCAB,
    draft_vocab_from: str | None = options.DRAFT_VOCAB_FROM,
    warmup: bool | None = options.WARMUP,
    n_gpu_layers: int = options.N_GPU_LAYERS,
    draft_gpu_layers: int | None = options.DRAFT_GPU_LAYERS,
    device: str | None = options.DEVICE,
    device_draft: str | None = options.DEVICE_DRAFT,
    split_mode: str = options.SPLIT_MODE,
    tensor_split: str | None = options.TENSOR_SPLIT,
    main_gpu: int = options.MAIN_GPU,
    rpc: str | None = options.RPC,
    ctx_size: int = session_options.ctx_size("Context size in tokens."),
    batch_size: int = options.BATCH_SIZE,
    threads: int | None = options.THREADS,
    flash_attn: str | None = options.FLASH_ATTN,
    temp: float = session_options.temp(0.0, "Temperature (0: greedy)."),
    top_k: int = session_options.top_k(),
    top_p: float = session_options.top_p(),
    seed: int = session_options.seed(0),
    min_p: float = session_options.MIN_P,
    typical_p: float = session_options.TYPICAL,
    repeat_penalty: float = session_options.REPEAT_PENALTY,
    repeat_last_n: int = session_options.REPEAT_LAST_N,
    presence_penalty: float = session_options.PRESENCE_PENALTY,
    frequency_penalty: float = session_options.FREQUENCY_PENALTY,
    ignore_eos: bool = session_options.IGNORE_EOS,
    stats_json: Path | None = typer.Option(None, "--stats-json",
                                           help="Statistics as JSON to this file ('-': stdout's last line, "
                                                "after the text); with -p or -f also tokens_sha256, the answer's "
                                                "token ids hashed."),
    draft_profile: Path | None = typer.Option(
        None, "--spec-draft-profile", help="With --spec-draft-n-max auto: start from the step times and acceptance "
        "an earlier run on this model and machine measured (a file --spec-draft-profile-out wrote), instead of "
        "exploring draft lengths in the first answer."),
    draft_profile_out: Path | None = typer.Option(
        None, "--spec-draft-profile-out", help="With --spec-draft-n-max auto: write what it measured, for "
        "--spec-draft-profile."),
    force: bool = typer.Option(False, "--force",
                               help="Overwrite an existing --stats-json or --spec-draft-profile-out file."),
    perf: bool = typer.Option(False, "--perf",
                              help="Time each decode step by phase (verify, drafts, host reads, Python) into the "
                                   "statistics."),
) -> None:
    """Chat or complete with speculative decoding through the model's MTP head.

    Examples:

      gguf-mtp run Qwen3.5-9B-Q8_0.gguf -p "def quicksort(xs):" -n 128

      gguf-mtp run -m Qwen3.5-9B-Q4_K_M.gguf -md Qwen3.5-9B-Q8_0-MTP.gguf --spec-type draft-mtp -fa on

      gguf-mtp run Qwen3.5-9B-Q4_K_M.gguf --mtp Qwen3.5-9B-Q8_0-MTP.gguf -ngl 99

      gguf-mtp run Qwen3.5-9B-Q4_K_M.gguf --spec-draft-n-max auto --stats-json stats.json

      gguf-mtp run Qwen3.5-9B-Q4_K_M.gguf -ngl 99 --spec-draft-n-max auto --spec-draft-profile-out h100.json

      gguf-mtp run Qwen3.5-9B-Q8_0.gguf -ngl 99 --device CUDA0 --device-draft CUDA1

      gguf-mtp run big.gguf -ngl 99 --rpc 192.168.1.20:50052 --tensor-split 1,1
    """
    # imported here, before anything loads numpy: llama.cpp's libraries must come first (see gguf_mtp.runtime)
    from gguf_mtp.runtime import MTPSession, devices, patches
    from gguf_mtp.runtime import draft_profile as draft_profile_mod
    from gguf_mtp.runtime.options import check_sampling
    from gguf_mtp.runtime.rpc import add_servers

    model = options.model_path(model_arg, model_opt)
    mtp = options.sidecar(mtp_opt, model_draft)
    no_mtp = options.no_mtp_from_spec_type(spec_type, no_mtp_opt)
    n_predict = options.n_predict(n_predict)
    endpoints = device_options.endpoints(rpc) if rpc is not None else None
    stats_file = None if stats_json is None or str(stats_json) == "-" else stats_json
    given = [p for p in (model, mtp, prompt_file, draft_profile) if p is not None]
    outputs = {opt: p for opt, p in (("--stats-json", stats_file), ("--spec-draft-profile-out", draft_profile_out))
               if p is not None}
    if not list_devices:  # a bad output fails now, not after the answer (nor after reaching an RPC server)
        _check_outputs(outputs, force=force, inputs=given)
    if endpoints:  # their devices join the registry first, as llama.cpp's --rpc (listing and start-up line see them)
        add_servers(endpoints)
    if list_devices:
        typer.echo(devices.listing())
        raise typer.Exit()
    if model is None:
        raise typer.BadParameter("missing the model: give a GGUF file as the argument or with -m/--model")

    if no_mtp and mtp is not None:
        raise typer.BadParameter("a sidecar (--mtp/-md) and --no-mtp (--spec-type none) exclude each other")
    for name, text in (("--prompt", prompt), ("--system", system)):
        if text is not None and not is_utf8(text):
            raise typer.BadParameter(f"{name} is not valid UTF-8 text")
    cfg = session_options.session_config(
        draft_n_max=draft_n_max, p_min=p_min, prompt_window=prompt_window, warmup=warmup, require_mtp=require_mtp,
        n_gpu_layers=n_gpu_layers, draft_gpu_layers=draft_gpu_layers, device=device, device_draft=device_draft,
        split_mode=split_mode, tensor_split=tensor_split, main_gpu=main_gpu, rpc=rpc, ctx_size=ctx_size,
        batch_size=batch_size, threads=threads, flash_attn=flash_attn, timings=perf or None,
        draft_vocab=draft_vocab, draft_vocab_from=draft_vocab_from)
    for opt, val in (("--spec-draft-profile", draft_profile), ("--spec-draft-profile-out", draft_profile_out)):
        if val is not None and (no_mtp or not cfg.adaptive):
            raise typer.BadParameter(f"{opt} needs --spec-draft-n-max auto (and MTP on)")
    if prompt_file is not None and prompt is not None:
        raise typer.BadParameter("--prompt and --file exclude each other")
    err = lambda s: typer.echo(s, err=True)  # noqa: E731
    # the session's options are checked by MTPSession before it opens a file; sampling's here, before loading
    sampling, notes = check_sampling(session_options.sampler_config(
        temp=temp, top_k=top_k, top_p=top_p, seed=seed, min_p=min_p, typical_p=typical_p,
        repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n, presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty, ignore_eos=ignore_eos))
    for n in notes:
        err(f"note: {n}")
    # opened now (a missing file or a FIFO fails before the model loads), read once the model says how long a
    # prompt can be
    prompt_fh = _open_prompt(prompt_file) if prompt_file is not None else None
    try:
        session = MTPSession(model, mtp=False if no_mtp else (mtp or "auto"), config=cfg,
                             on_notice=lambda s: err(f"note: {s}"))
    except BaseException:
        if prompt_fh is not None:
            prompt_fh.close()
        raise
    with session:
        sampling, notes = check_sampling(sampling, session.model.n_vocab)  # the vocabulary bounds --top-k
        for n in notes:
            err(f"note: {n}")
        if prompt_fh is not None and prompt_file is not None:
            prompt = _read_prompt(prompt_fh, prompt_file, session)
        err(devices.startup_line(max(n_gpu_layers, draft_gpu_layers or 0)))  # once the files passed their checks
        err(patches.startup_line())
        sidecar = session.pairing.sidecar
        inputs = given + session.pairing.model.files + (sidecar.files if sidecar else [])
        for out in outputs.values():  # the sidecar found beside the model is an input too
            check_output(out, force=force, inputs=inputs)
        if device or device_draft or tensor_split or rpc or split_mode != "layer":
            err("placement: " + "; ".join(f"{k} {v}" for k, v in session.placement.items()))
        if session.mtp_enabled:
            err(f"MTP: {session.describe_mtp()}")
        if draft_profile is not None and session.mtp_enabled:
            note = draft_profile_mod.use(session, draft_profile)
            err(f"note: {note}" if note else f"auto: starting from the draft profile {draft_profile}")
        if prompt is not None:
            g = session.generate(prompt, max_tokens=n_predict, sampling=sampling, on_text=_out,
                                 stop=reverse_prompt or ())
            sys.stdout.write("\n")
            _ended(g, session, err)
        else:
            g = None
            _chat(session, system, n_predict, sampling, err, reverse_prompt or [])
        if stats_json is not None:
            payload = session.stats.to_dict() | {"mtp": session.pairing.source.value, "notices": session.notices,
                                                 "rollback": session.engine.rollback.name,
                                                 "placement": session.placement}
            if g is not None:  # -p / -f: the answer's tokens, to compare runs token for token
                payload["tokens_sha256"] = g.tokens_sha256()
            if session.engine.adaptive is not None:
                payload["auto"] = session.engine.adaptive.summary()
            if stats_file is None:  # "-": stdout's last line, one JSON object after the text (| tail -n 1)
                typer.echo(json.dumps(payload))
            else:
                write_bytes(stats_file, (json.dumps(payload, indent=2) + "\n").encode(), force=force, inputs=inputs)
        if draft_profile_out is not None and session.mtp_enabled:
            draft_profile_mod.save(session, draft_profile_out, force=force, inputs=inputs)


def _check_outputs(outputs: dict[str, Path], *, force: bool, inputs: list[Path]) -> None:
    """Each output on its own and apart from the others: two options naming one file would have the second
    refused after the whole answer (or, with --force, replace the first), so that is refused first, even with
    --force."""
    seen: dict[str, str] = {}
    for opt, path in outputs.items():
        where = os.path.realpath(path)  # the same file by another spelling or through a symlink
        if where in seen:
            raise typer.BadParameter(f"{seen[where]} and {opt} name the same file ({path}); give each its own file")
        seen[where] = opt
        check_output(path, force=force, inputs=inputs)


def _open_prompt(path: Path) -> BinaryIO:
    """The --file prompt, opened (not read)."""
    try:
        return open_input(path, "prompt file")
    except FileNotFoundError:
        raise GgufMtpError(f"{path}: no such file") from None
    except OSError as e:
        raise GgufMtpError(describe_os_error(e, path)) from None


def _read_prompt(fh: BinaryIO, path: Path, session: MTPSession) -> str:
    """The prompt file's text; one longer than any prompt the context can hold is refused unread."""
    from gguf_mtp.runtime import tokens

    with fh:
        room = session.prompt_room
        most = tokens.max_bytes(session.model, room)
        size = os.fstat(fh.fileno()).st_size
        if size > most:
            raise GgufMtpError(f"{path}: {size} bytes, more than a prompt that fits the context can have "
                               f"({room} tokens of at most {most // room} bytes each); shorten it, or raise "
                               "-c/--ctx-size")
        try:
            data = fh.read(most + 1)
        except OSError as e:
            raise GgufMtpError(describe_os_error(e, path)) from None
    if len(data) > most:  # it grew since fstat
        raise GgufMtpError(f"{path}: more than {most} bytes, more than a prompt that fits the context can have; "
                           "shorten it, or raise -c/--ctx-size")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GgufMtpError(f"{path}: not valid UTF-8 text (byte {e.start}); save the prompt file as UTF-8") from None


def _out(s: str) -> None:
    """Generated text, shown as it comes."""
    sys.stdout.write(s)
    sys.stdout.flush()


#: chat commands, never sent to the model
CHAT_HELP = ("commands: /help shows this; /reset clears the conversation (the system message stays); /exit or "
             "/quit (or Ctrl-D) quits")


def _chat(session: MTPSession, system: str | None, n_predict: int, sampling: SamplerConfig,
          err: Callable[[str], None], stop: list[str]) -> None:
    messages = [{"role": "system", "content": system}] if system else []
    if hasattr(sys.stdin, "reconfigure"):  # undecodable bytes: one line is refused, the chat goes on
        sys.stdin.reconfigure(errors="surrogateescape")
    interactive = sys.stdin.isatty()
    if interactive:
        err("chat: type a message; /help lists the commands, /reset clears the conversation, /exit or Ctrl-D quits")
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            break
        except KeyboardInterrupt:
            err("")
            break
        text = line.strip()
        if not text:
            continue
        if not is_utf8(text):
            err("error: stdin: this message is not valid UTF-8 text; it was skipped")
            continue
        if text in ("/exit", "/quit"):
            break
        if text in ("/help", "/?"):
            err(CHAT_HELP)
            continue
        if text == "/reset":
            turns = sum(m["role"] == "user" for m in messages)
            messages = messages[:1] if system else []
            err(f"reset: the conversation is cleared ({turns} turn{'s' if turns != 1 else ''} forgotten"
                + ("; the system message stays)" if system else ")"))
            continue
        messages.append({"role": "user", "content": text})
        try:
            g = session.chat(messages, max_tokens=n_predict, sampling=sampling, on_text=_out, stop=stop)
        except GgufMtpError as e:
            sys.stdout.write("\n")
            err(f"error: {e}")
            messages.pop()
            continue
        sys.stdout.write("\n")
        messages.append({"role": "assistant", "content": g.text})
        _ended(g, session, err)
    err(f"session: {session.stats.compact()}")
