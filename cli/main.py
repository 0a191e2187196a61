"""``gguf-mtp``: the Typer app. Each command parses, calls the library, prints; user mistakes end in a
one-line ``error:`` message and exit status 2, never a traceback."""

from __future__ import annotations

import sys

import typer

from gguf_mtp.errors import GgufMtpError

from . import convert_cmd, extract_cmd, inspect_cmd, quantize_cmd, run_cmd

app = typer.Typer(
    name="gguf-mtp",
    help="Multi-token-prediction (MTP) heads for GGUF models: convert, inspect, extract, graft, run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
@app.callback(invoke_without_command=True)
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True)) -> None:
    if version:
        import gguf_mtp

        typer.echo(f"gguf-mtp {gguf_mtp.__version__}")
        raise typer.Exit()


app.command("convert", no_args_is_help=True)(convert_cmd.convert)
app.command("inspect", no_args_is_help=True)(inspect_cmd.inspect)
app.command("extract", no_args_is_help=True)(extract_cmd.extract)
app.command("run", no_args_is_help=True)(run_cmd.run)
app.command("quantize", no_args_is_help=True)(quantize_cmd.quantize)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 user error, 130 interrupted)."""
    try:
        app(args=argv, standalone_mode=False)
    except GgufMtpError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: nothing was written", file=sys.stderr)
        return 130
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except typer.TyperException as e:  # usage errors: bad option, missing argument
        show = getattr(e, "show", None)
        if show is None:
            raise
        show()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
