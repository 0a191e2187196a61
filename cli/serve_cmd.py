"""``gguf-mtp serve``: an OpenAI-compatible server with MTP speculative decoding (options as llama-server's)."""

from __future__ import annotations

from pathlib import Path

import typer

from gguf_mtp.errors import GgufMtpError
from gguf_mtp.files import read_input_text

from . import options, session_options


@options.llamacpp_options("serve")
def serve(
    model_arg: Path | None = typer.Argument(None, metavar="MODEL",
                                            help="GGUF model (bundled, or trunk with a sidecar beside it)."),
    model_opt: Path | None = options.MODEL,
    list_devices: bool = typer.Option(False, "--list-devices", is_eager=True, callback=session_options.list_devices,
                                      help="Print the devices this llama.cpp build can use and exit."),
    mtp_opt: Path | None = options.MTP,
    model_draft: Path | None = options.MODEL_DRAFT,
    no_mtp_opt: bool = options.NO_MTP,
    spec_type: str | None = options.SPEC_TYPE,
    require_mtp: bool = options.REQUIRE_MTP,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8080, "--port", min=0, max=65535,
                             help="Port to listen on (0: any free port, printed at start)."),
    parallel: int = typer.Option(1, "--parallel", "-np", min=1, max=64,
                                 help="Slots: requests served at once, each in its own sequence; -c is split between "
                                      "them."),
    alias: str | None = typer.Option(None, "--alias", "-a", help="Model name for clients (default: the file's stem)."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="LLAMA_API_KEY",
                                       help="Require 'Authorization: Bearer KEY' (all but /health)."),
    chat_template_file: Path | None = typer.Option(None, "--chat-template-file",
                                                   help="Jinja chat template to use instead of the GGUF's."),
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
    ctx_size: int = session_options.ctx_size("Context size in tokens, shared by the slots."),
    batch_size: int = options.BATCH_SIZE,
    threads: int | None = options.THREADS,
    flash_attn: str | None = options.FLASH_ATTN,
    n_predict: int = session_options.n_predict(-1, "Default max_tokens (-1: until the end or the slot's context is "
                                                   "full)."),
    temp: float = session_options.temp(0.8, "Default temperature for requests that set none."),
    top_k: int = session_options.top_k("Default top-k."),
    top_p: float = session_options.top_p("Default top-p."),
    seed: int = session_options.seed(-1, "Default seed (-1: a random seed per request)."),
    min_p: float = session_options.MIN_P,
    typical_p: float = session_options.TYPICAL,
    repeat_penalty: float = session_options.REPEAT_PENALTY,
    repeat_last_n: int = session_options.REPEAT_LAST_N,
    presence_penalty: float = session_options.PRESENCE_PENALTY,
    frequency_penalty: float = session_options.FREQUENCY_PENALTY,
    ignore_eos: bool = session_options.IGNORE_EOS,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log every request (uvicorn's access log)."),
    cors_origins: str = typer.Option("*", "--cors-origins",
                                     help="Origins browsers may call from: * (any, as llama-server), localhost, or "
                                          "a comma-separated list of origins."),
    cors_credentials: bool = typer.Option(True, "--cors-credentials/--no-cors-credentials",
                                          help="Let browsers send credentials (the Origin is echoed back)."),
    log_disable: bool = typer.Option(False, "--log-disable",
                                     help="No log line per request on stderr (start-up lines stay)."),
) -> None:
    """Serve the model over HTTP with OpenAI's API (/v1/chat/completions, /v1/completions, /v1/models) and
    llama-server's (/completion, /tokenize, /detokenize, /apply-template, /props, /slots, /health, /metrics).
    The port opens first: requests get 503 "Loading model" until the model is loaded.

    Examples:

      gguf-mtp serve Qwen3.5-9B-Q8_0.gguf --port 8080

      gguf-mtp serve -m Qwen3.5-9B-Q8_0.gguf --spec-type draft-mtp -fa on --min-p 0.05

      gguf-mtp serve Qwen3.5-9B-Q4_K_M.gguf --mtp Qwen3.5-9B-MTP.gguf -ngl 99 -np 4 -c 16384
    """
    # imported here: the runtime loads llama.cpp's libraries before numpy (see gguf_mtp.runtime), and the CLI's
    # other commands must not need them (nor the serve extra)
    import gguf_mtp.runtime  # noqa: F401  (first: llama.cpp's libraries before numpy)
    from gguf_mtp.server import SessionLoad
    from gguf_mtp.server import serve as serve_session
    from gguf_mtp.server.cors import CorsPolicy

    model = options.model_path(model_arg, model_opt)
    if model is None:
        raise typer.BadParameter("missing the model: give a GGUF file as the argument or with -m/--model")
    mtp = options.sidecar(mtp_opt, model_draft)
    no_mtp = options.no_mtp_from_spec_type(spec_type, no_mtp_opt)
    n_predict = options.n_predict(n_predict)
    if no_mtp and mtp is not None:
        raise typer.BadParameter("a sidecar (--mtp/-md) and --no-mtp (--spec-type none) exclude each other")
    template = None
    if chat_template_file is not None:
        template = read_input_text(chat_template_file, "chat template")
        _check_template(template, chat_template_file)
    cfg = session_options.session_config(
        draft_n_max=draft_n_max, p_min=p_min, prompt_window=prompt_window, warmup=warmup, require_mtp=require_mtp,
        n_gpu_layers=n_gpu_layers, draft_gpu_layers=draft_gpu_layers, device=device, device_draft=device_draft,
        split_mode=split_mode, tensor_split=tensor_split, main_gpu=main_gpu, rpc=rpc, ctx_size=ctx_size,
        batch_size=batch_size, threads=threads, flash_attn=flash_attn, n_parallel=parallel,
        draft_vocab=draft_vocab, draft_vocab_from=draft_vocab_from)
    sampling = session_options.sampler_config(
        temp=temp, top_k=top_k, top_p=top_p, seed=seed, min_p=min_p, typical_p=typical_p, repeat_penalty=repeat_penalty,
        repeat_last_n=repeat_last_n, presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
        ignore_eos=ignore_eos)
    serve_session(SessionLoad(model, mtp=False if no_mtp else (mtp or "auto"), config=cfg, chat_template=template),
                  host, port, name=alias, sampling=sampling, n_predict=n_predict, api_key=api_key,
                  cors=CorsPolicy(cors_origins, cors_credentials), verbose=verbose, log_requests=not log_disable,
                  log=lambda line: typer.echo(line, err=True))


def _check_template(source: str, path: Path) -> None:
    from gguf_mtp.runtime.chat import ChatTemplate

    try:
        ChatTemplate(source).render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - any template failure is the file's problem
        raise GgufMtpError(f"{path}: the chat template does not render a simple conversation ({e})") from None
