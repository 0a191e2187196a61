"""Benchmark models: Qwen3.5-shaped GGUFs whose MTP head is right a known share of the time.

The trunk is a bigram model (``trunk_scale=0``: every block adds nothing, the LM head reads the token's own
embedding) and the head computes the same function one token later (``oracle_head``), so it is always right.
``noisy_head`` then writes random values (std ``0.02 * noise``) into the head block's two output projections
(``attn_output``, ``ffn_down``): the head's answer drifts and acceptance drops with ``noise``, while the
trunk, its speed and its output stay exactly the same. One checkpoint thus gives the whole set:

    python -m bench.models --workdir /tmp/m --layers 12 --vocab 248320 --noise 0.06 --quant Q4_K_M

How much noise gives what acceptance depends on the widths (the trunk's greedy path soon cycles, so acceptance
moves in steps): at Qwen3.5-9B widths 0.02 gave 64% at every position and 0.04 56/56/44% (4 layers, 32k
vocabulary, CPU); with the real 248,320-token vocabulary (4 layers, CPU, side_by_side.py's prompt, k=3, 128
tokens) 0.015 gave 92/86/81% (94/89/83% on an H100 with 12 layers), 0.03 79/67/62%, 0.05 74/46/38%, 0.06
70/42/32% (the default: the ~70% head issue 14 measures), 0.08 61/31/16%; at hidden 256, 0.3 gives 96/92/92% and 3
gives 71/60/51%.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

try:  # llama.cpp's libraries before numpy (README, CUDA pitfall); the "python" stage runs without them
    import gguf_mtp.runtime  # noqa: F401
except Exception:  # noqa: BLE001 - no llama.cpp yet (gpu.sh builds it meanwhile): conversions need none
    pass
import numpy as np

WIDTHS: dict[str, dict[str, Any]] = {  # Qwen3.5-9B's widths
    "9b": dict(hidden=4096, heads=16, kv_heads=4, head_dim=256, intermediate=12288, lin_k_heads=16, lin_v_heads=32,
               lin_head_dim=128),
    "small": dict(hidden=1024, heads=8, kv_heads=2, head_dim=128, intermediate=3072, lin_k_heads=8, lin_v_heads=16,
                  lin_head_dim=64),
    "tiny": dict(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=768, lin_k_heads=2, lin_v_heads=4,
                 lin_head_dim=64),
}
NOISY = ("attn_output.weight", "ffn_down.weight", "ffn_down_shexp.weight")  # the head block's output projections

# Release shapes (issue 24): family, widths, trunk layers, experts, experts used, and the head noise that gives a
# ~70% head at those widths (measured on the template, CPU, k=3, 96 tokens: 27b 0.06 gave 60/38/20%, 0.045
# 66/46/27%; 35b-a3b, whose head's routed experts inflate to zeros, 0.06 96/89/89%, 0.4 80/54/40%, 0.8
# 63/40/21%). Made as a 4-layer
# template at the shape's widths, inflated to full depth by big_model.inflate (trunk matrices as zeros: same speed,
# same function, so the head keeps the template's acceptance).
SHAPES = {
    "9b": ("qwen35", WIDTHS["9b"], 32, None, None, 0.06),  # Qwen3.5-9B
    "27b": ("qwen35", dict(hidden=5120, heads=24, kv_heads=4, head_dim=256, intermediate=17408, lin_k_heads=16,
                           lin_v_heads=48, lin_head_dim=128), 64, None, None, 0.035),  # Qwen3.6-27B
    "35b-a3b": ("qwen35moe", dict(hidden=2048, heads=16, kv_heads=2, head_dim=256, lin_k_heads=16, lin_v_heads=32,
                                  lin_head_dim=128, moe_intermediate=512, shared_intermediate=512),
                40, 256, 8, 0.6),  # Qwen3.6-35B-A3B
}


def checkpoint(work: Path, *, widths: str, layers: int, vocab: int, seed: int = 0) -> Path:
    """The synthetic checkpoint, made once: written into a temp folder and renamed when complete, so a killed run
    leaves no folder a later run would take for done. One an earlier version left half written (a 0-byte or short
    shard) is made again."""
    from tests.synthetic import SyntheticSpec

    spec = SyntheticSpec("qwen35", layers=layers, **WIDTHS[widths], vocab_size=vocab, oracle_head=True,
                         trunk_scale=0.0, head_noise=0.0, n_shards=4, seed=seed)
    return _made_once(work / f"ckpt-{widths}-{layers}L-{vocab}", spec)


def _made_once(ck: Path, spec) -> Path:  # type: ignore[no-untyped-def]
    """``ck`` written from ``spec`` unless a complete one is there: into a temp folder renamed when complete."""
    from tests.synthetic import write_checkpoint

    _remove_dead_temps(ck.parent, ck.name)
    if ck.exists():
        if _complete(ck):
            return ck
        print(f"{ck}: left half written by an earlier run; making it again", file=sys.stderr)
        shutil.rmtree(ck)
    tmp = ck.parent / f".{ck.name}.{os.getpid()}.partial"
    try:
        write_checkpoint(tmp, spec)
        os.rename(tmp, ck)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ck


def _complete(ck: Path) -> bool:
    """Whether every file the checkpoint names is there, with every shard as long as its header says."""
    from gguf_mtp.checkpoint.folder import Checkpoint
    from gguf_mtp.errors import GgufMtpError

    try:
        Checkpoint.open(ck)  # reads config.json and each shard's header against the shard's size
    except GgufMtpError:
        return False
    return all((ck / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))


def _remove_dead_temps(work: Path, name: str) -> None:
    """Temp folders of ``name`` that a killed run left (its process is gone)."""
    for p in work.glob(f".{name}.*.partial"):
        pid = p.name.removeprefix(f".{name}.").removesuffix(".partial")
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def convert(ck: Path, out: Path, outtype: str, threads: int) -> Path:
    from gguf_mtp.convert import convert as convert_checkpoint

    if not out.exists():
        convert_checkpoint(ck, outfile=out, outtype=outtype, layout="bundled", progress=False, threads=threads)
    return out


def noisy_head(src: Path, out: Path, noise: float, seed: int = 1) -> Path:
    """``src`` (bundled) with random ``attn_output`` / ``ffn_down`` in its MTP block, encoded as they were."""
    from gguf_mtp.ggml_types import encode
    from gguf_mtp.ggufio.atomic import atomic_paths
    from gguf_mtp.ggufio.model import GGUFModel
    from gguf_mtp.ggufio.writer import OutTensor, copy_tensor, write_all, write_gguf

    if out.exists():
        return out
    m = GGUFModel(src)
    n_trunk = int(m.arch_get("{arch}.block_count", 0)) - int(m.arch_get("{arch}.nextn_predict_layers", 0))
    rng = np.random.default_rng(seed)
    tensors = []
    for name, t in m.tensors.items():
        if name.startswith(f"blk.{n_trunk}.") and name.endswith(NOISY):
            info = t.info

            def write(fh, progress, info=info):  # type: ignore[no-untyped-def]
                x = (rng.standard_normal(int(np.prod(info.shape)), dtype=np.float32) * (0.02 * noise))
                write_all(fh, encode(x, info.ggml_type))
                progress(info.nbytes)

            tensors.append(OutTensor(name, info.shape, info.ggml_type, write))
        else:
            tensors.append(copy_tensor(t))
    with atomic_paths([out]) as (tmp,):
        write_gguf(tmp, m.model_kvs(), tensors)
    return out


def tie_rows(src: Path, out: Path, period: int) -> Path:
    """``src`` with its LM head's rows repeating every ``period`` tokens (row v = row v % period, bytes copied,
    any type): exact logit ties at every step, as the synthetic checkpoints made before rows were rotated had
    (a pool of 2^22 values tiled, so rows repeated every 2^22 / hidden tokens). For the tie-breaking report."""
    from gguf_mtp.ggufio.atomic import atomic_paths
    from gguf_mtp.ggufio.model import GGUFModel
    from gguf_mtp.ggufio.writer import OutTensor, copy_tensor, write_all, write_gguf

    m = GGUFModel(src)
    name = "output.weight" if "output.weight" in m.tensors else "token_embd.weight"
    tensors = []
    for n, t in m.tensors.items():
        if n != name:
            tensors.append(copy_tensor(t))
            continue
        info = t.info
        rows = int(info.shape[1])
        row_bytes = info.nbytes // rows

        def write(fh, progress, t=t, info=info, rows=rows, row_bytes=row_bytes):  # type: ignore[no-untyped-def]
            base = np.frombuffer(t.file.read_tensor_bytes(info.name), np.uint8)[: min(period, rows) * row_bytes]
            for r0 in range(0, rows, period):
                write_all(fh, base[: min(period, rows - r0) * row_bytes])
            progress(info.nbytes)

        tensors.append(OutTensor(n, info.shape, info.ggml_type, write))
    with atomic_paths([out]) as (tmp,):
        write_gguf(tmp, m.model_kvs(), tensors)
    return out


def quantize(src: Path, out: Path, ftype: str) -> Path:
    from gguf_mtp.quantize import quantize_model

    if not out.exists():
        quantize_model(src, out, ftype)  # the head stays Q8_0
    return out


def draft_head(src: Path, draft: str | None) -> Path | None:
    """``src`` with a draft LM head of type ``draft`` (``gguf-mtp ... --draft-head-type``), or None."""
    from gguf_mtp.surgery import add_draft_head

    if not draft:
        return None
    out = src.with_name(f"{src.stem}-draft-{draft}.gguf")
    if not out.exists():
        add_draft_head(src, out, draft, progress=False)
    return out


def mtp_typed(src: Path, mtp_type: str | None) -> Path | None:
    """``src`` with its MTP block's matrices at ``mtp_type`` (``gguf-mtp convert --mtp-type``; a draft LM head keeps
    its type), or None."""
    from gguf_mtp.ggml_types import MTP_TYPES, parse_type
    from gguf_mtp.ggufio.atomic import atomic_paths
    from gguf_mtp.ggufio.model import GGUFModel
    from gguf_mtp.ggufio.writer import copy_tensor, write_gguf
    from gguf_mtp.head import head_tensor, require_head

    if not mtp_type:
        return None
    out = src.with_name(f"{src.stem}-mtp-{mtp_type}.gguf")
    if not out.exists():
        t = parse_type(mtp_type, "--mtp-type", choices=MTP_TYPES)
        m = GGUFModel(src)
        head = {x.name for x in require_head(m, "SOURCE").tensors}
        tensors = [head_tensor(x, t) if n in head else copy_tensor(x) for n, x in m.tensors.items()]
        with atomic_paths([out]) as (tmp,):
            write_gguf(tmp, m.model_kvs(), tensors)
    return out


def make(work: Path, *, widths: str = "9b", layers: int = 12, vocab: int = 248320, noise: float = 0.06,
         quant: str | None = "Q4_K_M", threads: int | None = None, stage: str = "all",
         draft: str | None = None) -> dict[str, Path]:
    """label -> model. ``stage``: "python" (checkpoint and conversions: no llama.cpp needed), "llama" (what
    needs llama.cpp's quantizer), or "all". ``draft``: also each model with a draft LM head of that type."""
    work.mkdir(parents=True, exist_ok=True)
    threads = threads or os.cpu_count() or 2
    tag = f"{widths}-{layers}L-{vocab // 1000}k"
    ck = checkpoint(work, widths=widths, layers=layers, vocab=vocab)
    q8 = work / f"{tag}-Q8_0.gguf"
    bf16 = work / f"{tag}-BF16.gguf"
    out: dict[str, Path] = {}

    def add(label: str, path: Path) -> None:  # the model, then the same with the draft head
        out[label] = path
        if (d := draft_head(path, draft)) is not None:
            out[f"{label}, {draft.upper()} draft head"] = d  # type: ignore[union-attr]

    convert(ck, q8, "q8_0", threads)  # made once: a later stage finds them
    add("Q8_0, perfect head", q8)
    if noise > 0:
        add(f"Q8_0, noisy head ({noise})", noisy_head(q8, work / f"{tag}-Q8_0-noise{noise}.gguf", noise))
    if quant:
        convert(ck, bf16, "bf16", threads)
    if stage in ("llama", "all") and quant:
        qm = quantize(bf16, work / f"{tag}-{quant}.gguf", quant)
        add(f"{quant} + Q8_0 head, noisy ({noise})" if noise > 0 else f"{quant} + Q8_0 head",
            noisy_head(qm, work / f"{tag}-{quant}-noise{noise}.gguf", noise) if noise > 0 else qm)
    return out


def template(work: Path, shape: str, vocab: int, threads: int) -> Path:
    """A 4-layer Q8_0 GGUF at ``shape``'s widths with the oracle head (bigram trunk that adds nothing)."""
    from tests.synthetic import SyntheticSpec

    family, widths, _, experts, *_ = SHAPES[shape]
    tag = f"tpl-{shape}-{vocab // 1000}k"
    out = work / f"{tag}-Q8_0.gguf"
    if out.exists():
        return out
    kw = dict(experts=4, experts_used=2) if experts else {}  # widened by inflate
    spec = SyntheticSpec(family, layers=4, vocab_size=vocab, oracle_head=True, trunk_scale=0.0, head_noise=0.0,
                         n_shards=2, **widths, **kw)  # type: ignore[arg-type]
    return convert(_made_once(work / f"ckpt-{tag}", spec), out, "q8_0", threads)


def emitted_ids(model: Path, prompt: str, n: int, ngl: int = 99, *, drafts: int = 0) -> list[int]:
    """The token ids ``model`` emits (greedy) answering ``prompt``, ``n`` of them at most; with ``drafts`` = k, also
    every token its head drafts at k (the wrong ones too)."""
    from gguf_mtp.runtime import MTPSession, proposer

    lists: list[list[int]] = []  # read after the answer: a draft left on the device (patch 0010) is read in place
    orig = proposer.MtpProposer.propose

    def propose(self, *args, **kw):  # type: ignore[no-untyped-def]
        out = orig(self, *args, **kw)
        lists.extend(out[0])
        return out

    proposer.MtpProposer.propose = propose  # type: ignore[method-assign]
    try:
        with MTPSession(model, mtp="auto" if drafts else False, n_draft=max(1, drafts), n_gpu_layers=ngl,
                        n_ctx=n + 1024) as s:
            return list(s.generate(prompt, max_tokens=n).tokens) + [t for d in lists for t in d]
    finally:
        proposer.MtpProposer.propose = orig  # type: ignore[method-assign]


def with_draft_vocab(src: Path, out: Path, n: int, text: Path) -> Path:
    """``src`` with a draft vocabulary (``gguf_mtp.draft_vocab``, metadata only) of the ``n`` tokens most frequent in
    ``text`` (counted with llama.cpp's tokenizer: needs llama.cpp), or, for a ``.ids`` file (token ids, whitespace
    apart: emitted_ids()), among those ids. A synthetic model's answer must be counted by its ids: its vocabulary
    beyond the small trained BPE is filler whose text tokenizes back into other ids. Made once."""
    import numpy as np

    from gguf_mtp import draft_vocab
    from gguf_mtp.ggufio.atomic import atomic_paths
    from gguf_mtp.ggufio.model import GGUFModel
    from gguf_mtp.ggufio.writer import copy_tensor, write_gguf

    if out.exists():
        return out
    m = GGUFModel(src)
    if text.suffix == ".ids":
        n_vocab = len(m.get("tokenizer.ggml.tokens") or [])
        ids = np.array([int(x) for x in text.read_text().split()], dtype=np.int64)
        counts = np.bincount(ids[(ids >= 0) & (ids < n_vocab)], minlength=n_vocab)
        chosen = draft_vocab.by_counts(n, counts, draft_vocab.required_ids(m.get, src))
        kvs = draft_vocab.apply(m.model_kvs(), chosen, None, None, src)
    else:
        kvs = draft_vocab.apply(m.model_kvs(), None, n, text, src)
    with atomic_paths([out]) as (tmp,):
        write_gguf(tmp, kvs, [copy_tensor(t) for t in m.tensors.values()])
    return out


def shaped(work: Path, shape: str, *, vocab: int = 248320, noises: tuple[float | None, ...] = (None, 0.0),
           trunks: tuple[str, ...] = ("q8_0",), threads: int | None = None, draft_vocab: int | None = None,
           draft_vocab_text: Path | None = None, draft_vocab_only: bool = False,
           draft: str | None = None, mtp_type: str | None = None) -> dict[str, Path]:
    """label -> model at a release ``shape`` (SHAPES): each head noise (0: always right) x each trunk type
    (``q8_0``, ``q4_k_m``: llama.cpp's Q4_K/Q6_K rule for the trunk; embeddings, LM head and head stay Q8_0).
    A noise of None is the shape's ~70% one. With ``draft_vocab``, also each model with that draft vocabulary,
    labelled ``..., draft vocab N``: counted on ``draft_vocab_text``, or by default on the ids the model answers
    the one-shot prompt with and its head drafts on the way (needs llama.cpp). The drafts count too so the map
    does not drop the noisy head's wrong guesses: dropped, they would hand the draft its next best token, often
    the right one, and raise acceptance above the full head's, which a real head's map (its wrong guesses are
    frequent tokens too) does not. ``draft_vocab_only``: no full-vocabulary copies (a draft-vocabulary model runs
    with its map off under GGUF_MTP_DRAFT_VOCAB=0, and two 27B copies would not fit the device's disk); without
    ``draft_vocab`` it then makes the templates only. ``draft``: every model with a draft LM head of that type
    (``--draft-head-type``; with a draft vocabulary its N rows are read from it), labelled ``..., Q5_0 draft
    head`` and named ``...-draft-q5_0``. ``mtp_type``: every model with its MTP block's matrices at that type
    (``--mtp-type``), labelled ``..., Q4_0 MTP block``."""
    from bench.big_model import inflate

    work.mkdir(parents=True, exist_ok=True)
    _, _, layers, experts, used, typical = SHAPES[shape]
    tpl = template(work, shape, vocab, threads or os.cpu_count() or 2)
    out: dict[str, Path] = {}
    tag = (f"-draft-{draft}" if draft else "") + (f"-mtp-{mtp_type}" if mtp_type else "")  # file names, labels
    dh = (f", {draft.upper()} draft head" if draft else "") + (f", {mtp_type.upper()} MTP block" if mtp_type else "")
    for noise in dict.fromkeys(typical if n is None else n for n in noises):
        src = noisy_head(tpl, tpl.with_name(f"{tpl.stem}-noise{noise}.gguf"), noise) if noise > 0 else tpl
        src = draft_head(src, draft) or src
        src = mtp_typed(src, mtp_type) or src
        for trunk in trunks:
            path = work / f"{shape}-{layers}L-{trunk.upper()}{f'-noise{noise}' if noise > 0 else ''}{tag}.gguf"
            head = f"noisy head ({noise})" if noise > 0 else "perfect head"
            if not draft_vocab_only:
                if not path.exists():
                    inflate(src, path, layers, experts=experts, experts_used=used, trunk=trunk)
                out[f"{shape} {trunk.upper()}, {head}{dh}"] = path
            if draft_vocab:
                text = draft_vocab_text
                if text is None:  # what this head's model answers and drafts: its wrong drafts stay in the map
                    text = src.with_name(f"{src.stem}-emitted.ids")
                    if not text.exists():
                        from bench.oneshot import PROMPT

                        text.write_text(" ".join(map(str, emitted_ids(src, PROMPT, 2048, drafts=3))) + "\n")
                mapped = with_draft_vocab(src, src.with_name(f"{src.stem}-dv{draft_vocab}.gguf"), draft_vocab, text)
                vpath = path.with_name(f"{path.stem}-dv{draft_vocab}.gguf")
                if not vpath.exists():
                    inflate(mapped, vpath, layers, experts=experts, experts_used=used, trunk=trunk)
                out[f"{shape} {trunk.upper()}, {head}, draft vocab {draft_vocab}{dh}"] = vpath
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/gguf-mtp-bench"))
    ap.add_argument("--widths", choices=sorted(WIDTHS), default="9b")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=248320)
    ap.add_argument("--noise", type=float, help="0: a head that is always right (default 0.06; with --shape, the "
                    "shape's ~70%% noise)")
    ap.add_argument("--quant", default="Q4_K_M", help="also a trunk at this type with the Q8_0 head ('' to skip)")
    ap.add_argument("--stage", choices=["python", "llama", "all"], default="all")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--draft-head", help="also each model with a draft LM head of this type (e.g. q5_0)")
    ap.add_argument("--mtp-type", help="with --shape: each model with its MTP block's matrices at this type (q4_0, "
                    "q5_0, ...)")
    ap.add_argument("--manifest", type=Path, help="write LABEL=PATH lines (side_by_side.py --model arguments)")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="a release shape instead (template + inflate): "
                    "--noise and --trunks choose the variants, --layers/--widths/--quant are ignored")
    ap.add_argument("--trunks", default="q8_0", help="with --shape: trunk types, comma-separated (q8_0,q4_k_m)")
    ap.add_argument("--draft-vocab", type=int, help="with --shape: also each model with a draft vocabulary of N "
                    "tokens, counted on --draft-vocab-text or, by default, on what each model answers and drafts "
                    "(needs llama.cpp)")
    ap.add_argument("--draft-vocab-text", type=Path, help="the text (or .ids file of token ids) the draft "
                    "vocabulary is counted on")
    ap.add_argument("--heads", default="noisy,perfect", help="with --shape: which heads, comma-separated "
                    "(noisy: the ~70%% one or --noise; perfect)")
    ap.add_argument("--draft-vocab-only", action="store_true", help="with --shape: no full-vocabulary copies "
                    "(with --draft-vocab: only the draft-vocabulary models; without: only the templates)")
    ap.add_argument("--print-template", action="store_true", help="with --shape: print the template's path, make "
                    "nothing else")
    a = ap.parse_args()
    if a.shape and a.print_template:
        print(template(a.workdir, a.shape, a.vocab, a.threads or os.cpu_count() or 2))
        return
    if a.shape:
        heads = set(a.heads.split(","))
        if not heads or heads - {"noisy", "perfect"}:
            sys.exit(f"error: --heads {a.heads}: use noisy, perfect or both (comma-separated)")
        noises = ((a.noise,) if "noisy" in heads else ()) + ((0.0,) if "perfect" in heads else ())
        made = shaped(a.workdir, a.shape, vocab=a.vocab, noises=noises,
                      trunks=tuple(a.trunks.split(",")), threads=a.threads, draft_vocab=a.draft_vocab,
                      draft_vocab_text=a.draft_vocab_text, draft_vocab_only=a.draft_vocab_only, draft=a.draft_head,
                      mtp_type=a.mtp_type)
    else:
        made = make(a.workdir, widths=a.widths, layers=a.layers, vocab=a.vocab,
                    noise=0.06 if a.noise is None else a.noise, quant=a.quant or None,
                    threads=a.threads, stage=a.stage, draft=a.draft_head)
    for label, p in made.items():
        print(f"{label}\t{p}\t{p.stat().st_size / 1e9:.2f} GB", file=sys.stderr)
    if a.manifest:
        a.manifest.write_text("".join(f"{label}={p}\n" for label, p in made.items()))


if __name__ == "__main__":
    main()
