"""``gguf-mtp convert``."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import DRAFT_VOCAB, DRAFT_VOCAB_FROM, TYPE_NAME, text


def convert(
    model: str = typer.Argument(..., callback=text(4096),
                                help="Checkpoint folder, or a Hugging Face repo id (org/name)."),
    outfile: str | None = typer.Option(None, "--outfile", "-o", callback=text(4096), metavar="PATH",
                                       help="Output file (or folder). Default: ./<model>-<OUTTYPE>.gguf, -trunk with "
                                            "--no-mtp, -MTP[-head][-<MTP TYPE>] with --mtp: never the same name "
                                            "for another layout or type; a sidecar's name pairs it with the trunk."),
    outtype: str = typer.Option("bf16", "--outtype", callback=TYPE_NAME, help="Trunk tensor type: f32, f16, bf16, "
                                "q8_0."),
    mtp: bool | None = typer.Option(
        None, "--mtp/--no-mtp",
        help="--mtp: write only the MTP head (sidecar, '-MTP' name). --no-mtp: write the trunk without a head. "
             "Default: bundled (model + head)."),
    head_only: bool = typer.Option(False, "--head-only",
                                   help="With --mtp: leave out token_embd/output (small sidecar that borrows the "
                                        "target's; needs `gguf-mtp run`)."),
    mtp_type: str = typer.Option("q8_0", "--mtp-type", callback=TYPE_NAME,
                                 help="Type of the MTP block's matrices: f32, f16, bf16, q8_0 (the default, whatever "
                                      "--outtype), or q5_1, q5_0, q4_1, q4_0 (fewer bytes a draft reads; check "
                                      "the acceptance)."),
    draft_head_type: str | None = typer.Option(
        None, "--draft-head-type", callback=TYPE_NAME,
        help="Give the MTP layer its own copy of the LM head at this type (q4_0, q4_1, q5_0, q5_1, q8_0): drafts read "
             "fewer bytes, the target still verifies with the full head. Default: none."),
    draft_vocab: int | None = DRAFT_VOCAB,
    draft_vocab_from: str | None = DRAFT_VOCAB_FROM,
    revision: str | None = typer.Option(None, "--revision", callback=text(256),
                                        help="Hub revision (branch, tag or commit) for a repo id."),
    force_download: bool = typer.Option(False, "--force-download",
                                        help="Repo id: download again even if cached (drops the cached partial "
                                             "download of a sidecar)."),
    threads: int | None = typer.Option(None, "--threads", "-t", help="Worker threads for encoding."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite an existing output file."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line."),
) -> None:
    """Convert a Hugging Face checkpoint with an MTP head to GGUF (bundled, --no-mtp or --mtp).

    Examples:

      gguf-mtp convert ./Qwen3.5-9B --outtype q8_0            # bundled: model + head

      gguf-mtp convert ./Qwen3.5-9B --outtype q8_0 --no-mtp   # Qwen3.5-9B-Q8_0-trunk.gguf

      gguf-mtp convert ./Qwen3.5-9B --outtype q8_0 --mtp      # Qwen3.5-9B-Q8_0-MTP.gguf sidecar

      gguf-mtp convert ./Qwen3.5-9B --mtp --head-only         # Qwen3.5-9B-BF16-MTP-head-Q8_0.gguf
    """
    from gguf_mtp.convert import convert as _convert
    from gguf_mtp.layout import Layout
    from gguf_mtp.progress import human_bytes

    if head_only and mtp is not True:
        raise typer.BadParameter("--head-only applies to the sidecar: add --mtp")
    layout = Layout.BUNDLED if mtp is None else (Layout.TRUNK_ONLY if mtp is False else
                                                 (Layout.HEAD_ONLY if head_only else Layout.MTP_ONLY))
    r = _convert(model, outfile=Path(outfile) if outfile is not None else None, outtype=outtype, layout=layout,
                 mtp_type=mtp_type, draft_head_type=draft_head_type, force=force,
                 revision=revision, progress=not quiet, threads=threads, force_download=force_download,
                 draft_vocab=draft_vocab, draft_vocab_from=draft_vocab_from)
    for note in r.notes:
        typer.echo(f"note: {note}", err=True)
    rate = r.bytes_in / max(r.seconds, 1e-9)
    typer.echo(f"wrote {r.path} ({r.layout.value}, {r.arch}, {r.n_tensors} tensors, {human_bytes(r.bytes_out)}) "
               f"in {r.seconds:.1f} s, {human_bytes(rate)}/s of input")
