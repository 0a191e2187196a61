"""Serve a session over HTTP: the listening socket, the load on its own thread, uvicorn, and the signals that stop
them (the ``gguf-mtp serve`` command parses its options and calls :func:`serve`).

Example:
    >>> from gguf_mtp.runtime import MTPSession, SessionConfig
    >>> from gguf_mtp.server import SessionLoad, serve
    >>> with MTPSession("Qwen3.5-9B-Q8_0.gguf", n_parallel=2) as s:                # doctest: +SKIP
    ...     serve(s, "127.0.0.1", 8080)           # until Ctrl-C or SIGTERM
    >>> serve(SessionLoad("Qwen3.5-9B-Q8_0.gguf", config=SessionConfig(n_gpu_layers=99)), port=8080)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..errors import GgufMtpError

if TYPE_CHECKING:  # imported in serve() at run time: the runtime loads llama.cpp, the app needs the serve extra
    import uvicorn

    from ..runtime import MTPSession, SamplerConfig, SessionConfig
    from .app import ServerState
    from .cors import CorsPolicy
    from .loader import Loader


@dataclass
class SessionLoad:
    """A session to load once the port is open: until it is loaded every route answers llama-server's 503
    "Loading model", so clients and load balancers see a server that is starting. The arguments are
    :class:`~gguf_mtp.runtime.MTPSession`'s."""

    model: str | os.PathLike[str]
    mtp: str | os.PathLike[str] | bool | None = "auto"
    config: SessionConfig | None = None
    chat_template: str | None = None

    def check(self) -> None:
        """Refuse what can be refused without loading (the options, then the files' headers), before the port
        opens; RPC servers' devices join the registry (the start-up line names them)."""
        from ..runtime import SessionConfig
        from ..runtime.options import check_session
        from ..runtime.pairing import resolve

        self.config, _ = check_session(self.config or SessionConfig(), speculative=self.mtp not in (False, None))
        resolve(self.model, self.mtp)
        if self.config.rpc:
            from ..runtime.rpc import add_servers

            add_servers(self.config.rpc)

    def load(self, on_notice: Callable[[str], None]) -> MTPSession:
        from ..runtime import MTPSession

        return MTPSession(self.model, mtp=self.mtp, config=self.config, chat_template=self.chat_template,
                          on_notice=on_notice)


def _stderr(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: the server still serves
        pass


def serve(session: MTPSession | SessionLoad, host: str = "127.0.0.1", port: int = 8080, *,
          name: str | None = None, sampling: SamplerConfig | None = None, n_predict: int = -1,
          api_key: str | None = None, cors: CorsPolicy | None = None, verbose: bool = False, log_requests: bool = True,
          log: Callable[[str], None] = _stderr) -> None:
    """Serve ``session`` with OpenAI's and llama-server's HTTP API on ``host``:``port`` (0: any free port, said in
    the start-up lines) until SIGINT or SIGTERM, then return (as llama-server, which exits 0 on them).

    ``session``: a loaded :class:`~gguf_mtp.runtime.MTPSession` (left open: its owner closes it), or a
    :class:`SessionLoad`, checked before the port opens and loaded after (closed on return). Its
    ``n_parallel`` slots share its context. ``name``: the model's name for clients (default: the file's stem);
    ``sampling``, ``n_predict``: what requests leave out (default: llama-server's, temperature 0.8 and a random
    seed per request; a seed of -1 stays random per request; -1 tokens: until the end or a full slot);
    ``api_key``: required as ``Authorization: Bearer KEY`` on every route but ``/health``; ``cors``: which
    browser origins may call (default: any, as llama-server); ``verbose``: uvicorn's access log;
    ``log_requests``: one line per request on stderr; ``log``: where the start-up lines and notes go (stderr).

    Raises :class:`~gguf_mtp.errors.GgufMtpError` for what stops it from serving: a bad option or file, a port
    it cannot listen on, a model that fails to load, the serve extra missing.

    Example:
        >>> from gguf_mtp.runtime import MTPSession
        >>> with MTPSession("Qwen3.5-9B-Q8_0.gguf", n_parallel=4, n_ctx=16384) as s:  # doctest: +SKIP
        ...     serve(s, "0.0.0.0", 8080, name="qwen", api_key="sekrit")
    """
    from ..runtime import devices, patches  # first: llama.cpp's libraries before any other (see gguf_mtp.runtime)

    try:
        import uvicorn

        from .app import build_app
        from .cors import CorsPolicy
        from .loader import Loader
        from .metrics import Metrics
    except ImportError as e:
        raise GgufMtpError(f"gguf-mtp serve needs the serve extra ({e}): pip install \"gguf-mtp[serve]\"") from None
    # what can be refused without loading is refused before the port opens: the request defaults, the options,
    # the files' headers
    sampling = _request_defaults(sampling, log)
    if isinstance(session, SessionLoad):
        session.check()
        cfg = session.config
        model_path = Path(session.model)
    else:
        cfg, model_path = session.cfg, Path(session.pairing.model.path)
    assert cfg is not None  # SessionLoad.check set it
    sock = _listen(host, port)  # before loading: a busy port fails fast
    h, p = sock.getsockname()[:2]
    url = f"http://{_url_host(h)}:{p}"
    log(devices.startup_line(max(cfg.n_gpu_layers, cfg.draft_gpu_layers or 0)))
    log(patches.startup_line())
    name = name or model_path.stem
    metrics = Metrics(cfg.n_parallel)

    def load() -> ServerState:
        if not isinstance(session, SessionLoad):
            return _state(session, metrics, name=name, sampling=sampling, n_predict=n_predict, api_key=api_key,
                          model_path=str(model_path), log_requests=log_requests, log=log)
        s = session.load(lambda n: log(f"note: {n}"))
        try:
            return _state(s, metrics, name=name, sampling=sampling, n_predict=n_predict, api_key=api_key,
                          model_path=str(model_path), log_requests=log_requests, log=log)
        except BaseException:
            s.close()
            raise

    def loaded() -> None:  # on the load thread, once the load has ended
        st = loader.ready_state()
        if st is None:  # failed or cancelled: the server stops (the main thread reports why)
            server.should_exit = True
            return
        s = st.session
        mtp_desc = f"MTP {s.describe_mtp()}" if s.mtp_enabled else "no MTP"
        log(f"gguf-mtp serve: {name} ({mtp_desc}), {s.cfg.n_parallel} slot(s) of {st.scheduler.n_ctx_seq} tokens")
        log(f"listening on {url}")

    loader = Loader(load, on_end=loaded)
    app = build_app(loader, cors if cors is not None else CorsPolicy())
    config = uvicorn.Config(app, log_level="info" if verbose else "warning", access_log=verbose,
                            lifespan="on", timeout_graceful_shutdown=10)
    server = _server(config, loader)

    def stop(signum: int, frame: FrameType | None) -> None:  # until uvicorn takes the signals over, and after
        loader.cancel()
        server.should_exit = True

    saved = _catch_signals(stop)
    try:
        if isinstance(session, SessionLoad):
            log(f"gguf-mtp serve: loading {model_path.name}; {url} answers 503 until it is loaded")
        loader.start()
        server.run(sockets=[sock])
    finally:
        loader.cancel()  # uvicorn failing: stop the load too
        loader.join()
        _restore_signals(saved)
        if loader.state is not None:
            loader.state.scheduler.close()
            if isinstance(session, SessionLoad):
                loader.state.session.close()
        sock.close()
    if loader.error is not None and not loader.cancelled.is_set():
        raise loader.error
    log("gguf-mtp serve: stopped")


def _state(session: MTPSession, metrics: Any, *, name: str, sampling: SamplerConfig, n_predict: int,
           api_key: str | None, model_path: str, log_requests: bool, log: Callable[[str], None]) -> ServerState:
    """The server's state around a loaded session, its scheduler not started yet; the request defaults are bounded
    by the vocabulary now (a top-k above it keeps every token, said in a note)."""
    from ..runtime import tokens
    from .app import ServerState
    from .scheduler import Defaults, Scheduler

    applied = _request_defaults(sampling, log, session.model.n_vocab)
    tokens.facts(session.model)  # read the vocabulary's facts now, not in the first long request
    defaults = Defaults(temp=applied.temp, top_k=applied.top_k, top_p=applied.top_p, seed=applied.seed,
                        n_predict=n_predict, min_p=applied.min_p, typical_p=applied.typical_p,
                        repeat_penalty=applied.repeat_penalty, repeat_last_n=applied.repeat_last_n,
                        presence_penalty=applied.presence_penalty, frequency_penalty=applied.frequency_penalty,
                        ignore_eos=applied.ignore_eos)
    return ServerState(session=session, scheduler=Scheduler(session, metrics), metrics=metrics, model_name=name,
                       defaults=defaults, created=int(time.time()), api_key=api_key or None,
                       model_path=model_path, log_requests=log_requests)


def _request_defaults(sampling: SamplerConfig | None, log: Callable[[str], None],
                      n_vocab: int | None = None) -> SamplerConfig:
    """The sampling for requests that set none (llama-server's: temperature 0.8, a random seed per request), through
    the checks every request's sampling passes; with ``n_vocab`` bounded by the vocabulary. Notes go to ``log``.
    Its seed -1 stays "random per request" (the check would draw one seed for all)."""
    from ..runtime import SamplerConfig
    from ..runtime.options import check_sampling

    given = sampling if sampling is not None else SamplerConfig(temp=0.8, seed=-1)
    if given.seed != -1:
        check_sampling(SamplerConfig(seed=given.seed))
    applied, notes = check_sampling(dataclasses.replace(given, seed=0), n_vocab)
    for n in notes:
        log(f"note: {n}")
    return dataclasses.replace(applied, seed=given.seed)


def _server(config: uvicorn.Config, loader: Loader) -> uvicorn.Server:
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
            # we have shut down cleanly and close the model ourselves, so serve() returns (llama-server exits 0)
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
