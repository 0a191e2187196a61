"""Where greedy MTP output and plain output part on a GPU, show that the two logit vectors for that position
differ only by float noise (batch of 2 vs batch of 1) and that the top-2 margin there is smaller than that noise."""

import sys

from gguf_mtp.runtime import MTPSession  # first: loads llama.cpp before numpy (see gguf_mtp/runtime)

# isort: split

# isort: split
import numpy as np

from gguf_mtp.convert import convert
from gguf_mtp.runtime.llama import Batch
from tests import helpers
from tests.synthetic import SyntheticSpec, write_checkpoint

ngl = int(sys.argv[1]) if len(sys.argv) > 1 else 99
write_checkpoint("/tmp/m-ck", SyntheticSpec("qwen35", oracle_head=True, trunk_scale=0.5))
path = convert("/tmp/m-ck", outfile="/tmp/m.gguf", outtype="q8_0", force=True, progress=False).path
LONG = ("Multi-token prediction heads let a model guess the next few tokens at once. A draft is checked by the "
        "full model in one batch, and every token that matches is accepted for free. ") * 2
with MTPSession(path, mtp=False, n_gpu_layers=ngl, n_ctx=1024, n_batch=32) as p:
    ref = p.generate(LONG, max_tokens=48).tokens
with MTPSession(path, n_gpu_layers=ngl, n_ctx=1024, n_batch=32, n_draft=1) as s:
    out = s.generate(LONG, max_tokens=48).tokens
i = next((j for j, (a, b) in enumerate(zip(ref, out)) if a != b), None)
print("first difference at", i, "plain", ref[i] if i is not None else None, "mtp", out[i] if i is not None else None)
if i is not None:
    prompt = None
    logits = {}
    for mode, toks in (("single", 1), ("batched", 2)):
        with MTPSession(path, mtp=False, n_gpu_layers=ngl, n_ctx=1024, n_batch=32) as p:
            e = p.engine
            prompt = p.model.tokenize(LONG)
            e.feed(prompt + ref[:i])  # positions before i decoded; ref[i-1] pending at position n
            n = len(e.tokens)
            b = Batch(4)
            assert e.id_last is not None  # fed above
            b.add(e.id_last, n, logits=True)
            if toks == 2:
                b.add(ref[i], n + 1, logits=True)
            e.tgt.decode_batch(b)
            logits[mode] = helpers.logits(e.tgt, 0)
    for mode, lg in logits.items():
        top = np.argsort(-lg)[:2]
        print(f"{mode}: top-2 tokens {top.tolist()} margin {float(lg[top[0]] - lg[top[1]]):.6f}")
    print("max |single - batched| over the vocabulary", float(np.abs(logits["single"] - logits["batched"]).max()))
