"""The Python API of the runtime: a model paired with its MTP head, a completion and a two-turn chat.

    .venv/bin/python examples/chat_session.py MODEL.gguf [SIDECAR.gguf]

Without arguments it converts the shipped tiny model (examples/tiny-qwen35-mtp, a trained MTP head) into a
trunk and a head-only sidecar first.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gguf_mtp.runtime import MTPSession, SamplerConfig  # first: llama.cpp before numpy
from gguf_mtp import convert  # noqa: E402

TINY = Path(__file__).resolve().parent / "tiny-qwen35-mtp"


def demo_files(out: Path) -> tuple[Path, Path]:
    trunk = convert(TINY, outfile=out / "tiny-qwen35-mtp-Q8_0.gguf", outtype="q8_0", layout="trunk-only",
                    force=True, progress=False).path
    head = convert(TINY, outfile=out / "tiny-qwen35-mtp-Q8_0-MTP.gguf", outtype="q8_0", layout="head-only",
                   force=True, progress=False).path
    return trunk, head


def main() -> None:
    if len(sys.argv) > 1:
        model, mtp = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "auto")
    else:
        out = Path("out/demo")
        out.mkdir(parents=True, exist_ok=True)
        model, mtp = demo_files(out)  # the sidecar sits beside the model: "auto" would find it too
    with MTPSession(model, mtp=mtp, n_draft=3, n_ctx=2048, on_notice=print) as s:
        print(f"head: {s.pairing.source.value}")
        g = s.generate("The quick brown fox", max_tokens=32, on_text=lambda t: print(t, end="", flush=True))
        print(f"\n{g.stats.compact()}")
        messages = [{"role": "user", "content": "Say something."}]
        for turn in range(2):
            r = s.chat(messages, max_tokens=32, sampling=SamplerConfig(temp=0.7, seed=turn))
            print(f"assistant: {r.text!r}\n  {r.stats.compact()}")
            messages += [{"role": "assistant", "content": r.text}, {"role": "user", "content": "Go on."}]
        print("session:", s.stats.to_dict()["acceptance_at"], "acceptance by draft position")


if __name__ == "__main__":
    main()
