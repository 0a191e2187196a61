"""Load and run each (model, sidecar) pair of a JSON list through MTPSession, one after the other, in this
process. Used by the fuzz tests in a subprocess: a pair that kills the process by a signal is the last one
announced on stdout. A refusal (GgufMtpError) is the expected outcome for a broken file.

    python -m tests.load_each pairs.json
"""

from __future__ import annotations

import json
import sys

from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import MTPSession


def main(path: str) -> int:
    pairs = json.loads(open(path, encoding="utf-8").read())
    for i, (model, mtp) in enumerate(pairs):
        print(f"start {i}", flush=True)
        try:
            with MTPSession(model, mtp=mtp, n_ctx=64, n_batch=8, n_draft=2) as s:
                s.generate("hello world", max_tokens=3)
            print(f"ran {i}", flush=True)
        except GgufMtpError as e:
            print(f"refused {i}: {str(e)[:200]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
