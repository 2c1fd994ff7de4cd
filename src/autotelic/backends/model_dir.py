"""Model directories as settings name them: a local Hugging Face directory, ``hf:NAME`` (a cached hub snapshot),
``random:SHAPE`` or none (the embedded model); what keeps one from loading, found from its files; chat templates."""

from __future__ import annotations

import json
from pathlib import Path

from autotelic.backends.embedded import (RANDOM_PREFIX, RANDOM_SHAPES, VISION_CONFIGS, ModelFileError,
                                         embedded_model_dir, random_model_dir)
from autotelic.backends.hub import HUB_PREFIX, NotCachedError, cached_model_dir


def read_chat_template(value: str) -> str:
    """``model.chat_template``: Jinja text as it is, or the text of the file it names."""
    if "{{" in value or "{%" in value:
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        raise ModelFileError(f"model.chat_template={value}: neither a Jinja template (no {{{{ or {{%) nor a file; "
                             "give the template text or the path of a .jinja file")
    return path.read_text()


def resolve_model_dir(path: str | None) -> Path:
    if path is None:
        return embedded_model_dir()
    if path.startswith(RANDOM_PREFIX):
        return random_model_dir(path.removeprefix(RANDOM_PREFIX))
    problem = model_dir_problem("model.path", path)
    if problem is not None:
        raise ModelFileError(problem)
    return cached_model_dir("model.path", path) if path.startswith(HUB_PREFIX) else Path(path).expanduser()


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def model_dir_problem(key: str, path: str) -> str | None:
    """What keeps local model directory ``path`` (the value of setting ``key``) from loading, found from its files
    alone (damaged weights surface only when they load); None when it looks like a Hugging Face model. ``hf:NAME``
    is the cached snapshot of NAME."""
    if path.startswith(HUB_PREFIX):
        try:
            model_dir = cached_model_dir(key, path)
        except NotCachedError as error:
            return str(error)
    else:
        model_dir = Path(path).expanduser()
    if not model_dir.is_dir():
        return f"{key}={path}: no such directory; give a local Hugging Face model directory"
    try:
        settings = json.loads((model_dir / "config.json").read_text())
    except FileNotFoundError:
        return f"{key}={path}: not a Hugging Face model directory (no config.json there)"
    except (ValueError, OSError) as error:
        return f"{key}={path}: config.json cannot be read ({error}); restore it from the model's source"
    if not isinstance(settings, dict) or "model_type" not in settings:
        return f"{key}={path}: config.json names no model_type; restore it from the model's source"
    if not any(any(model_dir.glob(pattern)) for pattern in WEIGHT_FILES):
        return f"{key}={path}: no weights (model.safetensors or pytorch_model.bin); download the whole model"
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        return f"{key}={path}: no tokenizer ({', '.join(TOKENIZER_FILES)}); copy the model's tokenizer files there"
    return None


def is_vision_model(model_dir: Path) -> bool:
    """Whether the model directory holds a vision-language model (its config has a vision tower)."""
    return "vision_config" in json.loads((model_dir / "config.json").read_text())


def sees_images(path: str | None) -> bool:
    """Whether the model setting ``path`` names a vision-language model; True for a directory that cannot load,
    whose problem ``model_dir_problem`` names."""
    if path is None:
        return False  # the embedded model reads text only
    if path.startswith(RANDOM_PREFIX):
        return RANDOM_SHAPES.get(path.removeprefix(RANDOM_PREFIX), ("",))[0] in VISION_CONFIGS
    return model_dir_problem("model.path", path) is not None or is_vision_model(resolve_model_dir(path))
