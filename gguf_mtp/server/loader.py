"""The model loads on a thread of its own while the port already answers (llama-server's 503 "Loading model"
until it is ready), so that clients and load balancers see a server that is starting, not a refused connection.

Cancelling (Ctrl-C, SIGTERM during the load) stops llama.cpp's load at its next progress callback: the runtime's
callback stops a load once an interrupt is waiting (:mod:`gguf_mtp.runtime.llama`), and here one is handed to it
from the thread that got the signal."""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import Terminated

if TYPE_CHECKING:
    from .app import ServerState


class Loader:
    """Runs ``load`` (which returns the server's state, its engine thread not started yet) on a thread; the
    engine starts once it returns. ``on_end`` is called on that thread when the load ends, well or not."""

    def __init__(self, load: Callable[[], ServerState], on_end: Callable[[], None] | None = None) -> None:
        self._load = load
        self.on_end = on_end
        self.state: ServerState | None = None  # set once loaded, even when cancelled meanwhile (to be closed)
        self.error: BaseException | None = None
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="gguf-mtp-load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def ready_state(self) -> ServerState | None:
        """The state, once the model is loaded and the engine runs (None while loading or after a failure)."""
        return self.state if self.done.is_set() and not self.cancelled.is_set() else None

    def _run(self) -> None:
        try:
            st = self._load()
            with self._lock:
                self.state = st
                if not self.cancelled.is_set():
                    st.scheduler.start()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread, which reports it
            self.error = e
        finally:
            self.done.set()
            if self.on_end is not None:
                self.on_end()

    def cancel(self) -> None:
        """Stop a load in progress (no-op once it has ended)."""
        with self._lock:
            if self.cancelled.is_set() or self.done.is_set():
                return
            self.cancelled.set()
        from ..runtime import llama

        llama.interrupt(Terminated(signal.SIGTERM))  # the load's next progress report raises it

    def join(self) -> None:
        """Wait for the load thread; an interrupt handed to a load that had already passed its last callback is
        dropped here, so that it is not raised later in an unrelated call."""
        if self._thread.is_alive():
            self._thread.join()
        if self.error is not None and self.cancelled.is_set():  # a load stopped half-way leaves llama.cpp objects
            self.error.__traceback__ = None  # to the collector: free them now, while the runtime still owns
            gc.collect()  # llama.cpp's log (at exit, their messages would reach stderr)
        if self.cancelled.is_set() and self._thread.ident is not None:
            from ..runtime import llama

            try:
                llama.raise_interrupt()
            except Terminated:
                pass
