"""``gguf-mtp``: the Typer app, and the one place that turns every failure into an exit status.

Exit status: 0 done; 2 a one-line ``error: ...`` (bad input or request, OS error, out of memory, and as a
last resort an internal error); 130 interrupted (Ctrl-C); 128 + the signal for SIGTERM (143) and SIGHUP
(129), which unwind like Ctrl-C; 141 when stdout is closed early (``| head``). ``serve`` is the exception: SIGINT
and SIGTERM are how a server is stopped, and it exits 0 once it has shut down, as llama-server does (a service
manager counts 143 from ``stop`` as a failure). Tracebacks only with ``--debug`` (or ``GGUF_MTP_DEBUG=1``).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

import typer

from gguf_mtp.errors import GgufMtpError, Terminated
from gguf_mtp.files import describe_os_error

from . import convert_cmd, extract_cmd, inspect_cmd, plot_cmd, quantize_cmd, rpc_server_cmd, run_cmd, serve_cmd

app = typer.Typer(
    name="gguf-mtp",
    help="Multi-token-prediction (MTP) heads for GGUF models: convert, inspect, extract, graft, run, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help, not rich's tables: those cut option names to fit the terminal
    # (`--spec-draft-prompt-w…` at 80 columns); plain help keeps every name whole and wraps the text
    rich_markup_mode=None,
)
_debug = False
#: click's usage-error base (recent typer releases vendor click as typer._click, older ones use click)
_UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


@app.callback(invoke_without_command=True)
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True),
          debug: bool = typer.Option(False, "--debug",
                                     help="Show the Python traceback of an error (for bug reports).")) -> None:
    global _debug
    _debug = _debug or debug
    if version:
        import gguf_mtp

        typer.echo(f"gguf-mtp {gguf_mtp.__version__}")
        raise typer.Exit()


app.command("convert", no_args_is_help=True)(convert_cmd.convert)
app.command("inspect", no_args_is_help=True)(inspect_cmd.inspect)
app.command("extract", no_args_is_help=True)(extract_cmd.extract)
app.command("run", no_args_is_help=True)(run_cmd.run)
app.command("quantize", no_args_is_help=True)(quantize_cmd.quantize)
app.command("serve", no_args_is_help=True)(serve_cmd.serve)
app.command("rpc-server")(rpc_server_cmd.rpc_server)
app.command("plot", no_args_is_help=True)(plot_cmd.plot)
_COMMANDS = ("convert", "inspect", "extract", "run", "quantize", "serve", "rpc-server", "plot")

#: signals that unwind like Ctrl-C (temp files removed), then exit with 128 + the signal
_TERMINATING = ("SIGTERM", "SIGHUP")


def _on_terminate(signum: int, frame: object) -> None:
    for name in _TERMINATING:  # once: a second signal must not cut the clean-up short
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    raise Terminated(signum)


def install_signal_handlers() -> Callable[[], None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` (where they still have their default action and we are
    the main thread); returns a function that restores the previous handlers."""
    saved: list[tuple[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None]] = []
    for name in _TERMINATING:
        sig = getattr(signal, name, None)
        try:
            if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:  # nohup's SIG_IGN is kept
                saved.append((sig, signal.signal(sig, _on_terminate)))
        except ValueError:  # not the main thread: the embedding program owns signals
            break

    def restore() -> None:
        for sig, old in saved:
            try:
                signal.signal(sig, old)
            except ValueError:
                pass

    return restore


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: the exit status still tells
        pass


def report(e: BaseException, *, debug: bool = False) -> int:
    """Print ``e`` as one line on stderr (with the traceback when ``debug``) and return the exit status."""
    if isinstance(e, SystemExit):
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if debug and not isinstance(e, (KeyboardInterrupt, Terminated)):
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    if isinstance(e, KeyboardInterrupt):
        _say("\ninterrupted: nothing was written")
        return 130
    if isinstance(e, Terminated):
        name = signal.Signals(e.signum).name if e.signum in signal.Signals.__members__.values() else str(e.signum)
        _say(f"terminated ({name}): nothing was written")
        return 128 + e.signum
    if isinstance(e, BrokenPipeError):  # stdout closed early (| head): not an error of ours
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    if isinstance(e, GgufMtpError):
        _say(f"error: {_one_line(str(e))}")
    elif isinstance(e, MemoryError):
        _say("error: out of memory: the input asks for more memory than this machine has"
             + ("" if debug else " (rerun with --debug to see where)"))
    elif isinstance(e, OSError):
        _say(f"error: {_one_line(describe_os_error(e))}")
    elif isinstance(e, _UsageError):
        return _usage_error(e, [])
    else:
        msg = _one_line(str(e))[:300]
        _say(f"error: internal error: {type(e).__name__}: {msg}"
             + ("" if debug else " (rerun with --debug for the traceback)"))
    return 2


def _usage_error(e: Exception, args: list[str]) -> int:
    """A usage error in one line, pointing at the command's help (no arguments at all shows the help)."""
    if type(e).__name__ == "NoArgsIsHelpError":
        e.show()  # type: ignore[attr-defined]  # click's NoArgsIsHelpError
        return 2
    ctx = getattr(e, "ctx", None)
    if ctx is not None:
        path = ctx.command_path
    else:  # raised by a command's own checks (typer.BadParameter): name the command from the arguments
        path = " ".join(["gguf-mtp"] + [a for a in args if a in _COMMANDS][:1])
    # e is a click.ClickException, typed Exception here: typer's releases vendor click under other names
    _say(f"error: {_one_line(e.format_message())} (see '{path} --help')")  # type: ignore[attr-defined]
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (see the module docstring)."""
    global _debug
    args = list(sys.argv[1:] if argv is None else argv)
    _debug = os.environ.get("GGUF_MTP_DEBUG", "").lower() in ("1", "true", "yes")
    restore = install_signal_handlers()
    try:
        cmd = typer.main.get_command(app)
        # not app(standalone_mode=False): typer turns Ctrl-C into a returned Exit(130) there, and prints
        # its own message for a closed pipe; here every outcome reaches report()
        with cmd.make_context("gguf-mtp", args) as ctx:
            cmd.invoke(ctx)
        return 0
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        return report(KeyboardInterrupt())
    except _UsageError as e:  # usage errors: bad option, missing argument
        return _usage_error(e, args)
    except BaseException as e:  # noqa: BLE001 - the one place every failure becomes a status
        return report(e, debug=_debug)
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
