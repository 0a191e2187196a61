"""``gguf-mtp rpc-server``: ggml's RPC server from the installed llama.cpp build (what llama.cpp's rpc-server
binary runs), so a second machine can lend its devices to ``gguf-mtp run --rpc`` (or llama.cpp's --rpc)."""

from __future__ import annotations

import sys

import typer


def rpc_server(
    host: str = typer.Option("127.0.0.1", "--host", "-H",
                             help="Address to bind. No authentication: only a trusted network's address, never a "
                                  "public one."),
    port: int = typer.Option(50052, "--port", "-p", min=1, max=65535, help="Port to bind."),
    device: str | None = typer.Option(None, "--device", "-d",
                                      help="Comma-separated devices to serve (default: the GPUs, else the CPU)."),
    threads: int | None = typer.Option(None, "--threads", "-t", min=1,
                                       help="Threads for the CPU device (default: half the cores)."),
    cache: bool = typer.Option(False, "--cache", "-c",
                               help="Keep tensors the client sends in a local file cache ($LLAMA_CACHE/rpc or "
                                    "~/.cache/llama.cpp/rpc), as llama.cpp's rpc-server -c."),
) -> None:
    """Serve this machine's devices to `gguf-mtp run --rpc HOST:PORT` over ggml's RPC protocol (Ctrl-C stops).

    Example (on the machine with the GPU; 10.0.0.2 is its address on a private network):

      gguf-mtp rpc-server --host 10.0.0.2 --port 50052
    """
    from gguf_mtp.backends import Device
    from gguf_mtp.runtime import rpc

    from .device_options import device_list

    names = device_list(device, "--device") if device else None
    if host not in ("127.0.0.1", "localhost"):
        typer.echo(f"WARNING: binding {host}: the RPC server has no authentication and runs whatever graph a client "
                   "sends; never expose it to an open network", err=True)

    def ready(devs: list[Device]) -> None:
        typer.echo(f"rpc-server: serving {', '.join(d.label() for d in devs)} on {host}:{port}", err=True)

    try:
        rpc.serve(host, port, names, threads, cache, on_ready=ready)
    except KeyboardInterrupt:
        typer.echo("rpc-server: stopped", err=True)
        sys.stdout.flush()
