"""``gguf-mtp extract``: sidecar out of a model, strip the head, or graft it onto another quant."""

from __future__ import annotations

from pathlib import Path

import typer

from gguf_mtp.checkpoint.hub import looks_like_repo_id, refuse_invalid_repo_id
from gguf_mtp.progress import human_bytes

from .options import DRAFT_VOCAB, DRAFT_VOCAB_FROM, TYPE_NAME, text


def extract(
    source: str = typer.Argument(..., callback=text(4096),
                                 help="GGUF with an MTP head (bundled model or sidecar; any shard of a split set), or "
                                      "a Hub repo id of an HF checkpoint: then only the head's bytes are downloaded."),
    onto: Path | None = typer.Option(None, "--onto",
                                     help="Graft: put SOURCE's head onto this model (a quant without a head)."),
    strip: bool = typer.Option(False, "--strip", help="Write SOURCE without its head (trunk-only)."),
    out: str | None = typer.Option(None, "--outfile", "-o", callback=text(4096), metavar="PATH",
                                       help="Output file; a split output gets -0000i-of-0000N suffixes. Default: "
                                            "./<SOURCE>-MTP[-head][-<head type>].gguf, ./<SOURCE>-trunk.gguf "
                                            "with --strip, ./<TARGET>-with-MTP.gguf with --onto."),
    head_only: bool = typer.Option(False, "--head-only",
                                   help="Sidecar without token_embd/output (borrows the target's)."),
    mtp_type: str | None = typer.Option(None, "--mtp-type", callback=TYPE_NAME,
                                        help="Re-encode the head's matrices (f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, "
                                             "q4_0); default: copy bytes as they are."),
    draft_head_type: str | None = typer.Option(
        None, "--draft-head-type", callback=TYPE_NAME,
        help="Give the head its own copy of the LM head at this type (q4_0, q4_1, q5_0, q5_1, q8_0); default: carry "
             "the head's tensors as they are."),
    draft_vocab: int | None = DRAFT_VOCAB,
    draft_vocab_from: str | None = DRAFT_VOCAB_FROM,
    replace: bool = typer.Option(False, "--replace", help="With --onto: replace a head TARGET already has."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite existing output files."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line."),
    revision: str | None = typer.Option(None, "--revision", callback=text(256),
                                        help="Hub revision, for a repo id SOURCE."),
    outtype: str = typer.Option("q8_0", "--outtype", callback=TYPE_NAME,
                                help="Type of the embeddings in a self-contained sidecar made from a repo id."),
    force_download: bool = typer.Option(False, "--force-download",
                                        help="Repo id SOURCE: drop the cached partial download and fetch the head's "
                                             "bytes again."),
) -> None:
    """Take the MTP head out of a GGUF (sidecar), strip it, or graft it onto another quant.

    Examples:

      gguf-mtp extract Qwen3.5-27B-Q8_0.gguf                          # -> Qwen3.5-27B-Q8_0-MTP.gguf

      gguf-mtp extract Qwen3.5-27B-Q8_0.gguf --head-only              # -> Qwen3.5-27B-Q8_0-MTP-head.gguf

      gguf-mtp extract Qwen3.5-27B-Q8_0.gguf --strip                  # -> Qwen3.5-27B-Q8_0-trunk.gguf

      gguf-mtp extract Qwen3.5-27B-Q8_0-MTP.gguf --onto Qwen3.5-27B-Q4_K_M.gguf -o Qwen3.5-27B-Q4_K_M-MTP-bundled.gguf
    """
    from gguf_mtp import surgery

    outfile = Path(out) if out is not None else None
    if onto is not None and strip:
        raise typer.BadParameter("choose one of --onto (graft) and --strip")
    if (onto is not None or strip) and head_only:
        raise typer.BadParameter("--head-only applies to sidecars (plain extract)")
    if replace and onto is None:
        raise typer.BadParameter("--replace applies to --onto")
    refuse_invalid_repo_id(source)
    if not Path(source).exists() and looks_like_repo_id(source):
        _from_hub(source, onto, strip, outfile, head_only, mtp_type, replace, force, quiet, revision, outtype,
                  force_download, draft_head_type, draft_vocab, draft_vocab_from)
        return
    if onto is not None:
        r = surgery.graft(source, onto, outfile, replace=replace, mtp_type=mtp_type, draft_head_type=draft_head_type,
                          force=force, progress=not quiet, draft_vocab=draft_vocab, draft_vocab_from=draft_vocab_from)
    elif strip:
        options = (("--mtp-type", mtp_type), ("--draft-head-type", draft_head_type), ("--draft-vocab", draft_vocab),
                   ("--draft-vocab-from", draft_vocab_from))
        given = [o for o, v in options if v is not None]
        if given:
            raise typer.BadParameter(f"{given[0]} has no effect with --strip (it drops the head and its draft "
                                     "vocabulary)")
        r = surgery.strip(source, outfile, force=force, progress=not quiet)
    else:
        r = surgery.extract(source, outfile, head_only=head_only, mtp_type=mtp_type, draft_head_type=draft_head_type,
                            force=force, progress=not quiet, draft_vocab=draft_vocab, draft_vocab_from=draft_vocab_from)
    for note in r.notes:
        typer.echo(f"note: {note}", err=True)
    names = ", ".join(str(p) for p in r.paths) if len(r.paths) <= 2 else f"{r.paths[0]} ... ({len(r.paths)} shards)"
    typer.echo(f"{r.op}: wrote {names} ({r.n_tensors} tensors, {human_bytes(r.bytes_written)}) in {r.seconds:.1f} s; "
               f"read {human_bytes(r.bytes_read)}")


def _from_hub(repo: str, onto: Path | None, strip: bool, outfile: Path | None, head_only: bool,
              mtp_type: str | None, replace: bool, force: bool, quiet: bool, revision: str | None,
              outtype: str, force_download: bool = False, draft_head_type: str | None = None,
              draft_vocab: int | None = None, draft_vocab_from: str | None = None) -> None:
    """SOURCE is a Hub checkpoint: fetch only the head's byte ranges, make the sidecar, graft it if asked."""
    from gguf_mtp import surgery
    from gguf_mtp.convert import convert as _convert

    if strip:
        raise typer.BadParameter("--strip needs a GGUF file, not a repo id")
    mt = mtp_type or "q8_0"
    if onto is None:
        r = _convert(repo, outfile=outfile, outtype=outtype, layout="head-only" if head_only else "mtp-only",
                     mtp_type=mt, draft_head_type=draft_head_type, force=force, revision=revision, progress=not quiet,
                     force_download=force_download, draft_vocab=draft_vocab, draft_vocab_from=draft_vocab_from)
        for note in r.notes:
            typer.echo(f"note: {note}", err=True)
        typer.echo(f"extract: wrote {r.path} ({r.layout.value}, {r.n_tensors} tensors, {human_bytes(r.bytes_out)})")
        return
    g = surgery.graft_from_hub(repo, onto, outfile, replace=replace, mtp_type=mtp_type,
                               draft_head_type=draft_head_type, force=force, revision=revision,
                               force_download=force_download, progress=not quiet,
                               on_note=lambda note: typer.echo(f"note: {note}", err=True), draft_vocab=draft_vocab,
                               draft_vocab_from=draft_vocab_from)
    typer.echo(f"graft: wrote {', '.join(str(p) for p in g.paths)} "
               f"({g.n_tensors} tensors, {human_bytes(g.bytes_written)})")
