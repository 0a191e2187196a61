"""``gguf-mtp extract``: sidecar out of a model, strip the head, or graft it onto another quant."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gguf_mtp import surgery
from gguf_mtp.progress import human_bytes


def extract(
    source: Path = typer.Argument(..., help="GGUF with an MTP head: a bundled model or an MTP sidecar (any shard of a split set)."),
    onto: Optional[Path] = typer.Option(None, "--onto", help="Graft: put SOURCE's head onto this model (a quant without a head)."),
    strip: bool = typer.Option(False, "--strip", help="Write SOURCE without its head (trunk-only)."),
    outfile: Optional[Path] = typer.Option(None, "--outfile", "-o", help="Output file; a split output gets -0000i-of-0000N suffixes."),
    head_only: bool = typer.Option(False, "--head-only", help="Sidecar without token_embd/output (borrows the target's)."),
    mtp_type: Optional[str] = typer.Option(None, "--mtp-type", help="Re-encode the head's matrices (e.g. q8_0); default: copy bytes as they are."),
    replace: bool = typer.Option(False, "--replace", help="With --onto: replace a head TARGET already has."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite existing output files."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line."),
) -> None:
    """Take the MTP head out of a GGUF (sidecar), strip it, or graft it onto another quant.

    Examples:

      gguf-mtp extract Qwen3.5-27B-Q8_0.gguf                          # -> Qwen3.5-27B-Q8_0-MTP.gguf

      gguf-mtp extract Qwen3.5-27B-Q8_0.gguf --head-only              # small sidecar, no embeddings

      gguf-mtp extract Qwen3.5-27B-Q8_0.gguf --strip                  # -> Qwen3.5-27B-Q8_0-trunk.gguf

      gguf-mtp extract Qwen3.5-27B-Q8_0-MTP.gguf --onto Qwen3.5-27B-Q4_K_M.gguf -o Qwen3.5-27B-Q4_K_M-MTP-bundled.gguf
    """
    if onto is not None and strip:
        raise typer.BadParameter("choose one of --onto (graft) and --strip")
    if (onto is not None or strip) and head_only:
        raise typer.BadParameter("--head-only applies to sidecars (plain extract)")
    if replace and onto is None:
        raise typer.BadParameter("--replace applies to --onto")
    if onto is not None:
        r = surgery.graft(source, onto, outfile, replace=replace, mtp_type=mtp_type, force=force, progress=not quiet)
    elif strip:
        if mtp_type:
            raise typer.BadParameter("--mtp-type has no effect with --strip")
        r = surgery.strip(source, outfile, force=force, progress=not quiet)
    else:
        r = surgery.extract(source, outfile, head_only=head_only, mtp_type=mtp_type, force=force, progress=not quiet)
    for note in r.notes:
        typer.echo(f"note: {note}", err=True)
    names = ", ".join(str(p) for p in r.paths) if len(r.paths) <= 2 else f"{r.paths[0]} ... ({len(r.paths)} shards)"
    typer.echo(f"{r.op}: wrote {names} ({r.n_tensors} tensors, {human_bytes(r.bytes_written)}) in {r.seconds:.1f} s; "
               f"read {human_bytes(r.bytes_read)}")
