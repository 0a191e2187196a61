"""``gguf-mtp quantize``."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import DRAFT_VOCAB, DRAFT_VOCAB_FROM, TYPE_NAME


def quantize(
    src: Path = typer.Argument(...,
                               help="Input GGUF (bundled model, trunk-only model or MTP sidecar) in F32, F16 or BF16; "
                                    "an already quantized one (Q8_0, ...) needs --allow-requantize."),
    dst: Path = typer.Argument(..., help="Output GGUF."),
    qtype: str = typer.Argument(..., callback=TYPE_NAME, metavar="TYPE",
                                help="Any llama-quantize type: Q4_K_M, Q5_K_M, Q6_K, IQ4_XS, Q4_0, ... (F32, F16 and "
                                     "BF16 keep a quantized head as it is)."),
    mtp_type: str = typer.Option("q8_0", "--mtp-type", callback=TYPE_NAME,
                                 help="Type of the MTP head's matrices ('same' = as the trunk)."),
    draft_head_type: str | None = typer.Option(
        None, "--draft-head-type", callback=TYPE_NAME,
        help="Give the MTP layer its own copy of the LM head at this type (q4_0, q4_1, q5_0, q5_1, q8_0), made from "
             "the input's LM head. Default: a draft head the input has keeps its type; none is added."),
    draft_vocab: int | None = DRAFT_VOCAB,
    draft_vocab_from: str | None = DRAFT_VOCAB_FROM,
    imatrix: Path | None = typer.Option(None, "--imatrix", help="Importance matrix from llama-imatrix (GGUF or .dat)."),
    threads: int = typer.Option(0, "--threads", "-t", help="Quantization threads (0: all cores)."),
    allow_requantize: bool = typer.Option(False, "--allow-requantize",
                                          help="Quantize tensors that are already quantized (e.g. a Q8_0 model to "
                                               "Q4_K_M), as llama-quantize: lower quality than from the original."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite an existing output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line (there is none when stderr is not a "
                                                            "terminal)."),
) -> None:
    """Quantize with llama.cpp's quantizer, keeping the MTP head at Q8_0.

    Examples:

      gguf-mtp quantize Qwen3.5-9B-BF16.gguf Qwen3.5-9B-Q4_K_M.gguf Q4_K_M

      gguf-mtp quantize Qwen3.5-9B-BF16.gguf Qwen3.5-9B-IQ4_XS.gguf IQ4_XS --imatrix imatrix.gguf
    """
    import gguf_mtp.runtime  # noqa: F401  (llama.cpp's libraries before numpy's, see gguf_mtp.runtime)
    from gguf_mtp.progress import human_bytes
    from gguf_mtp.quantize import quantize_model

    r = quantize_model(src, dst, qtype, mtp_type=None if mtp_type.lower() == "same" else mtp_type,
                       imatrix=imatrix, threads=threads, force=force, draft_head_type=draft_head_type,
                       allow_requantize=allow_requantize, progress=not quiet, draft_vocab=draft_vocab,
                       draft_vocab_from=draft_vocab_from)
    for n in r.notes:
        typer.echo(f"note: {n}", err=True)
    drafts = {t.name for t in r.report.draft_heads}
    head = {t.type for t in r.report.mtp_tensors if len(t.shape) > 1 and t.name not in drafts}
    draft = "/".join(sorted({t.type for t in r.report.draft_heads}))
    draft = f", draft LM head {draft}" if draft else ""
    typer.echo(f"wrote {r.path} ({r.report.layout.value}, {r.ftype}, head {'/'.join(sorted(head)) or '-'}{draft}, "
               f"{human_bytes(r.report.file_size)}) in {r.seconds:.1f} s")
