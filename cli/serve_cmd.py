"""``gguf-mtp serve``: an OpenAI-compatible server with MTP speculative decoding (options as llama-server's)."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import typer

from gguf_mtp.errors import GgufMtpError
from gguf_mtp.files import read_input_text

from . import options as O
from .run_cmd import _draft_n, _list_devices

if TYPE_CHECKING:  # imported in serve() at run time, after llama.cpp (see gguf_mtp.runtime)
    import uvicorn

    from gguf_mtp.server.loader import Loader


@O.llamacpp_options("serve")
def serve(
    model_arg: Path | None = typer.Argument(None, metavar="MODEL",
                                            help="GGUF model (bundled, or trunk with a sidecar beside it)."),
    model_opt: Path | None = O.MODEL,
    list_devices: bool = typer.Option(False, "--list-devices", is_eager=True, callback=_list_devices,
                                      help="Print the devices this llama.cpp build can use and exit."),
    mtp_opt: Path | None = O.MTP,
    model_draft: Path | None = O.MODEL_DRAFT,
    no_mtp_opt: bool = O.NO_MTP,
    spec_type: str | None = O.SPEC_TYPE,
    require_mtp: bool = O.REQUIRE_MTP,
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
    draft_n_max: str = O.DRAFT_N_MAX,
    p_min: float = O.P_MIN,
    prompt_window: int = O.PROMPT_WINDOW,
    warmup: bool | None = O.WARMUP,
    n_gpu_layers: int = O.N_GPU_LAYERS,
    draft_gpu_layers: int | None = O.DRAFT_GPU_LAYERS,
    device: str | None = O.DEVICE,
    device_draft: str | None = O.DEVICE_DRAFT,
    split_mode: str = O.SPLIT_MODE,
    tensor_split: str | None = O.TENSOR_SPLIT,
    main_gpu: int = O.MAIN_GPU,
    rpc: str | None = O.RPC,
    ctx_size: int = typer.Option(4096, "--ctx-size", "-c", help="Context size in tokens, shared by the slots."),
    batch_size: int = O.BATCH_SIZE,
    threads: int | None = O.THREADS,
    flash_attn: str | None = O.FLASH_ATTN,
    n_predict: int = typer.Option(-1, "--n-predict", "--predict", "-n",
                                  help="Default max_tokens (-1: until the end or the slot's context is full)."),
    temp: float = typer.Option(0.8, "--temp", "--temperature", help="Default temperature for requests that set none."),
    top_k: int = typer.Option(40, "--top-k", help="Default top-k."),
    top_p: float = typer.Option(0.95, "--top-p", help="Default top-p."),
    seed: int = typer.Option(-1, "--seed", "-s", help="Default seed (-1: a random seed per request)."),
    min_p: float = O.MIN_P,
    typical_p: float = O.TYPICAL,
    repeat_penalty: float = O.REPEAT_PENALTY,
    repeat_last_n: int = O.REPEAT_LAST_N,
    presence_penalty: float = O.PRESENCE_PENALTY,
    frequency_penalty: float = O.FREQUENCY_PENALTY,
    ignore_eos: bool = O.IGNORE_EOS,
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
    from gguf_mtp.runtime import MTPSession, SamplerConfig, SessionConfig, devices, patches, placement, tokens
    from gguf_mtp.runtime.options import check_sampling, check_session
    from gguf_mtp.runtime.pairing import resolve

    try:
        import uvicorn

        from gguf_mtp.server.app import ServerState, build_app
        from gguf_mtp.server.cors import CorsPolicy
        from gguf_mtp.server.engine import Defaults, Scheduler
        from gguf_mtp.server.loader import Loader
        from gguf_mtp.server.metrics import Metrics
    except ImportError as e:
        raise GgufMtpError(f"gguf-mtp serve needs the serve extra ({e}): pip install \"gguf-mtp[serve]\"") from None
    model = O.model_path(model_arg, model_opt)
    if model is None:
        raise typer.BadParameter("missing the model: give a GGUF file as the argument or with -m/--model")
    mtp = O.sidecar(mtp_opt, model_draft)
    no_mtp = O.no_mtp_from_spec_type(spec_type, no_mtp_opt)
    n_predict = O.n_predict(n_predict)
    if no_mtp and mtp is not None:
        raise typer.BadParameter("a sidecar (--mtp/-md) and --no-mtp (--spec-type none) exclude each other")
    err = lambda s: typer.echo(s, err=True)  # noqa: E731
    # the request defaults pass the checks every request's sampling passes (the seed: -1 stays "random per request")
    if seed != -1:
        check_sampling(SamplerConfig(seed=seed))
    sampling, notes = check_sampling(SamplerConfig(
        temp=temp, top_k=top_k, top_p=top_p, seed=0, min_p=min_p, typical_p=typical_p, repeat_penalty=repeat_penalty,
        repeat_last_n=repeat_last_n, presence_penalty=presence_penalty, frequency_penalty=frequency_penalty))
    for n in notes:
        err(f"note: {n}")
    template = None
    if chat_template_file is not None:
        template = read_input_text(chat_template_file, "chat template")
        _check_template(template, chat_template_file)
    k, adaptive = _draft_n(draft_n_max)
    cfg = SessionConfig(n_draft=k, adaptive=adaptive, p_min=p_min, n_ctx=ctx_size, n_batch=batch_size,
                        n_threads=threads, n_gpu_layers=n_gpu_layers, draft_gpu_layers=draft_gpu_layers,
                        require_mtp=require_mtp, prompt_window=prompt_window, warmup=warmup, n_parallel=parallel,
                        devices=placement.parse_device_list(device) if device is not None else None,
                        draft_devices=placement.parse_device_list(device_draft, "--device-draft")
                        if device_draft is not None else None,
                        split_mode=split_mode,
                        tensor_split=placement.parse_tensor_split(tensor_split) if tensor_split else None,
                        main_gpu=main_gpu, rpc=placement.parse_endpoints(rpc) if rpc else None,
                        flash_attn=O.flash_attn(flash_attn))
    head = False if no_mtp else (mtp or "auto")
    # what can be refused without loading is refused before the port opens: options, then the files' headers
    check_session(cfg, speculative=head is not False)
    resolve(model, head)
    if cfg.rpc:  # before the start-up line, so that it names their devices
        placement.add_rpc_servers(cfg.rpc)
    sock = _listen(host, port)  # before loading: a busy port fails fast
    h, p = sock.getsockname()[:2]
    url = f"http://{_url_host(h)}:{p}"
    err(devices.startup_line(max(n_gpu_layers, draft_gpu_layers or 0)))
    err(patches.startup_line())
    name = alias or model.stem
    metrics = Metrics(parallel)

    def load() -> ServerState:
        session = MTPSession(model, mtp=head, config=cfg, chat_template=template, on_notice=lambda s: err(f"note: {s}"))
        try:
            applied, notes = check_sampling(sampling, session.model.n_vocab)  # the vocabulary bounds --top-k
            for n in notes:
                err(f"note: {n}")
            tokens.facts(session.model)  # read the vocabulary's facts now, not in the first long request
            sched = Scheduler(session, metrics)
        except BaseException:
            session.close()
            raise
        return ServerState(session=session, scheduler=sched, metrics=metrics, model_name=name,
                           defaults=Defaults(temp=applied.temp, top_k=applied.top_k, top_p=applied.top_p, seed=seed,
                                             n_predict=n_predict, min_p=applied.min_p, typical_p=applied.typical_p,
                                             repeat_penalty=applied.repeat_penalty,
                                             repeat_last_n=applied.repeat_last_n,
                                             presence_penalty=applied.presence_penalty,
                                             frequency_penalty=applied.frequency_penalty, ignore_eos=ignore_eos),
                           created=int(time.time()), api_key=api_key or None, model_path=str(model),
                           log_requests=not log_disable)

    def loaded() -> None:  # on the load thread, once the load has ended
        st = loader.ready_state()
        if st is None:  # failed or cancelled: the server stops (the main thread reports why)
            server.should_exit = True
            return
        s = st.session
        mtp_desc = f"MTP {s.pairing.source.value}, draft {'auto' if adaptive else k}" if s.mtp_enabled else "no MTP"
        err(f"gguf-mtp serve: {name} ({mtp_desc}), {parallel} slot(s) of {st.scheduler.n_ctx_seq} tokens")
        err(f"listening on {url}")

    loader = Loader(load, on_end=loaded)
    app = build_app(loader, CorsPolicy(cors_origins, cors_credentials))
    config = uvicorn.Config(app, log_level="info" if verbose else "warning", access_log=verbose,
                            lifespan="on", timeout_graceful_shutdown=10)
    server = _Server(config, loader)

    def stop(signum: int, frame: FrameType | None) -> None:  # until uvicorn takes the signals over, and after
        loader.cancel()
        server.should_exit = True

    saved = _catch_signals(stop)
    try:
        err(f"gguf-mtp serve: loading {model.name}; {url} answers 503 until it is loaded")
        loader.start()
        server.run(sockets=[sock])
    finally:
        loader.cancel()  # uvicorn failing: stop the load too
        loader.join()
        _restore_signals(saved)
        if loader.state is not None:
            loader.state.scheduler.close()
            loader.state.session.close()
        sock.close()
    if loader.error is not None and not loader.cancelled.is_set():
        raise loader.error
    err("gguf-mtp serve: stopped")


def _Server(config: uvicorn.Config, loader: Loader) -> uvicorn.Server:
    """uvicorn's server, with the signal handler also cancelling every generation (so that open streams end now
    instead of holding the graceful shutdown until their last token), or the load in progress."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            st = loader.state
            if st is not None:
                st.scheduler.cancel_all()
            loader.cancel()
            super().handle_exit(sig, frame)
            # uvicorn re-raises the signal once shut down (death by SIGTERM, KeyboardInterrupt for SIGINT);
            # we have shut down cleanly and close the model ourselves, so the process exits with status 0
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()

    return Server(config)


def _catch_signals(handler: Callable[[int, FrameType | None], None]) -> list[tuple[int, Any]]:
    """SIGINT and SIGTERM stop the server (and a load in progress) instead of raising in the main thread while
    uvicorn is not yet running; uvicorn installs its own for the time it serves, then puts these back."""
    saved: list[tuple[int, Any]] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            saved.append((sig, signal.signal(sig, handler)))
        except ValueError:  # not the main thread (an embedding program): it owns the signals
            break
    return saved


def _restore_signals(saved: list[tuple[int, Any]]) -> None:
    for sig, old in saved:
        signal.signal(sig, old)


def _listen(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise GgufMtpError(f"--host {host}: cannot resolve it ({e.strerror})") from None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)  # "localhost": the IPv4 address clients usually try first
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise GgufMtpError(f"cannot listen on {host}:{port} ({e.strerror}); pick another --port or --host") from None
    sock.set_inheritable(True)
    return sock


def _url_host(h: str) -> str:
    return f"[{h}]" if ":" in h else h


def _check_template(source: str, path: Path) -> None:
    from gguf_mtp.runtime.chat import ChatTemplate

    try:
        ChatTemplate(source).render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - any template failure is the file's problem
        raise GgufMtpError(f"{path}: the chat template does not render a simple conversation ({e})") from None
