"""Resolving a MODEL argument: a local folder, or a Hugging Face repo id fetched into the normal HF cache."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import GgufMtpError

#: what a conversion needs from a repo (no README images, no original/ or consolidated weights)
CONVERT_PATTERNS = ["config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json",
                    "tokenizer_config.json", "chat_template.jinja", "chat_template.json", "generation_config.json"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def looks_like_repo_id(model: str) -> bool:
    return bool(_REPO_ID.match(model)) and not Path(model).exists()


def resolve_model(model: str | Path, *, revision: str | None = None, local_dir: Path | None = None,
                  include: list[str] | None = None) -> Path:
    """A local checkpoint folder for ``model`` (downloading only the needed files for a repo id)."""
    text = str(model)
    p = Path(text).expanduser()
    if p.exists() or not looks_like_repo_id(text):
        return p
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError:  # pragma: no cover - dependency of the package
        raise GgufMtpError("huggingface_hub is not installed; pip install huggingface_hub") from None
    import os

    try:
        return Path(snapshot_download(text, revision=revision, local_dir=local_dir,
                                      allow_patterns=include or CONVERT_PATTERNS,
                                      endpoint=os.environ.get("HF_ENDPOINT") or None))
    except RepositoryNotFoundError:
        raise GgufMtpError(f"{text}: no such repository on the Hub (or it is private: set HF_TOKEN)") from None
    except LocalEntryNotFoundError:
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
            raise GgufMtpError(f"{text}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
                               "download it first or pass a local folder") from None
        raise GgufMtpError(f"{text}: download failed (the Hub answered with an error or could not be reached); "
                           "run again to resume: files already downloaded are kept") from None
    except HfHubHTTPError as e:
        raise GgufMtpError(f"{text}: download failed ({e}); retry, the download resumes") from None
