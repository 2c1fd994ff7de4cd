"""``model.path=hf:NAME``: a model from the local Hugging Face cache, never downloaded (runs start offline).

The cache is huggingface_hub's (``HF_HUB_CACHE``, or ``HF_HOME``/hub): whatever ``huggingface-cli download NAME`` or
an earlier ``from_pretrained(NAME)`` left there. ``NAME@REVISION`` picks a branch, tag or commit.
"""

from __future__ import annotations

from pathlib import Path

HUB_PREFIX = "hf:"


class NotCachedError(LookupError):
    pass


def cached_model_dir(key: str, path: str) -> Path:
    """The cached snapshot directory of ``hf:NAME[@REVISION]`` (the value of setting ``key``)."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    name, _, revision = path.removeprefix(HUB_PREFIX).partition("@")
    if not name:
        raise NotCachedError(f"{key}={path}: name a model, e.g. {HUB_PREFIX}HuggingFaceTB/SmolLM2-135M-Instruct")
    try:
        return Path(snapshot_download(name, revision=revision or None, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        raise NotCachedError(f"{key}={path}: not in the local Hugging Face cache ({constants.HF_HUB_CACHE}); download "
                             f"it once with `huggingface-cli download {name}` (or point HF_HUB_CACHE at a cache "
                             "holding it), or give a local model directory") from None
