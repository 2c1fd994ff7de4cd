"""Vision-language policies: an image is a run of token ids past the vocabulary, one per image feature.

An observation names an image with a marker in its text, ``<image:PATH>`` (``image_marker`` stores an image and
returns its marker: the web environment's screenshots, ``envs/web/env.py``). Images live in the cache's image
store, each under its key, the first 48 bits of its SHA-256 (``store_image``; an image elsewhere is copied in when
first read). A vision-language policy (``HFPolicy`` on an Idefics3/SmolVLM directory, whose text models use 1-D
positions) tokenizes a marker as the model's image span: ``<fake_token_around_image><global-img>``, then
``image_seq_len`` ids ``base + key * image_seq_len + j`` (the j-th feature; ``base`` the embedding's rows), then
``<fake_token_around_image>``. The ids name the image's content, not the order a process met it, so every process
(Ray rollout workers and the learner, a resumed run) reads the same ids as the same image, and one image seen twice
is the same tokens. The text embedding, hooked (``ImageTokens.install``), embeds those ids as the image's features,
computed by the vision tower and connector at that forward, so gradients reach them. Everything downstream stays
token lists: prompts shared by a group, prefix caches, masks and checkpoints need no image side channel. Images are
observations, so their tokens are never trained (mask 0); they are never sampled (the head covers the vocabulary).

Each image is one tile at ``vision_config.image_size`` (no splitting into sub-images): a screenshot costs
``image_seq_len`` tokens (64 for SmolVLM's 512-pixel tiles).
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from autotelic.backends.embedded import cache_root

IMAGE_MARKER = re.compile(r"<image:([^<>\n]+)>")
AROUND_IMAGE, GLOBAL_IMAGE = "<fake_token_around_image>", "<global-img>"
PIXEL_CACHE = 64  # images whose pixels stay read
KEY_HEX = 12  # 48 bits: ids stay far inside int64 (key * image_seq_len), collisions stay out of reach


def image_path(key: int) -> Path:
    return cache_root() / "images" / f"{key:0{KEY_HEX}x}.png"


def store_image(data: bytes) -> int:
    """The key of the image ``data`` (its file's bytes, PNG or any format PIL reads), stored once under it."""
    key = int(hashlib.sha256(data).hexdigest()[:KEY_HEX], 16)
    path = image_path(key)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f"{path.name}.{os.getpid()}.partial")
        staging.write_bytes(data)
        staging.rename(path)  # atomic: a reader never sees half an image
    return key


def image_marker(png: bytes) -> str:
    """The marker naming the image ``png``, stored (``store_image``)."""
    return f"<image:{image_path(store_image(png))}>"


class ImageTokens:
    """A policy's images as token ids past the vocabulary, and their features (module docstring)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any) -> None:
        from transformers.models.idefics3 import Idefics3ImageProcessorPil

        config = model.config
        if config.model_type not in ("idefics3", "smolvlm"):
            raise ValueError(f"vision-language model type '{config.model_type}' is not supported; supported: "
                             "idefics3, smolvlm (their text models use 1-D positions)")
        size = config.vision_config.image_size
        self.seq_len = (size // config.vision_config.patch_size) ** 2 // config.scale_factor ** 2
        self.processor = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": size},
                                                   max_image_size={"longest_edge": size})
        self.model = model
        self.embedding = model.get_input_embeddings()
        self.base = self.embedding.num_embeddings
        missing = [t for t in (AROUND_IMAGE, GLOBAL_IMAGE) if t not in tokenizer.get_vocab()]
        if missing:
            raise ValueError(f"the tokenizer lacks the image tokens {missing}: not an Idefics3/SmolVLM tokenizer")
        self.around, self.global_image = tokenizer.convert_tokens_to_ids([AROUND_IMAGE, GLOBAL_IMAGE])
        # key -> (3, size, size): an image's pixels are read once while it is in use (a group's prompt, then its
        # update), not kept for a whole run (3 MB each at 512 px)
        self.pixels = lru_cache(maxsize=PIXEL_CACHE)(self._read_pixels)
        self._ids: torch.Tensor | None = None  # the ids of the embedding call under way (``install``)

    def tokenize(self, tokenizer: Any, text: str) -> list[int]:
        """``text``'s token ids, each image marker as its image span."""
        pieces = IMAGE_MARKER.split(text)  # text, path, text, path, ..., text
        ids: list[int] = []
        for i, piece in enumerate(pieces):
            if i % 2:
                ids += self.span(piece)
            elif piece:
                ids += tokenizer(piece, add_special_tokens=False).input_ids
        return ids

    def span(self, path: str) -> list[int]:
        """The image span of the image at ``path``, stored under its key and read here, so that a bad image is
        named when its observation is tokenized rather than in a forward."""
        try:
            key = store_image(Path(path).read_bytes())
        except OSError as error:
            raise ValueError(f"image {path} cannot be read ({error.strerror}); the observation names a missing "
                             "image") from None
        self.pixels(key)
        start = self.base + key * self.seq_len
        return [self.around, self.global_image, *range(start, start + self.seq_len), self.around]

    def _read_pixels(self, key: int) -> torch.Tensor:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(image_path(key)) as image:
                return self.processor(images=[[image.convert("RGB")]], return_tensors="pt")["pixel_values"][0, 0]
        except (OSError, UnidentifiedImageError) as error:
            raise ValueError(f"image {image_path(key)} cannot be read ({error})") from None

    def features(self, keys: list[int]) -> torch.Tensor:
        """(len(keys), seq_len, D): each image's features in the text model's embedding space."""
        pixels = torch.stack([self.pixels(key) for key in keys])[:, None].to(self.embedding.weight.device)
        return torch.stack(self.model.model.get_image_features(pixels).pooler_output)

    def install(self) -> None:
        """Hook the text embedding: ids past the vocabulary enter it as row 0, and leave it as image features."""
        self.embedding.register_forward_pre_hook(self._hide_image_ids)
        self.embedding.register_forward_hook(self._put_features)

    def _hide_image_ids(self, module: torch.nn.Module, inputs: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        (ids,) = inputs
        self._ids = ids
        return (ids.masked_fill(ids >= self.base, 0),)

    def _put_features(self, module: torch.nn.Module, inputs: Any, embeds: torch.Tensor) -> torch.Tensor:
        ids, self._ids = self._ids, None
        is_image = ids >= self.base
        if not bool(is_image.any()):
            return embeds
        offsets = ids[is_image] - self.base
        keys, inverse = (offsets // self.seq_len).unique(return_inverse=True)
        features = self.features(keys.tolist())[inverse, offsets % self.seq_len]  # (n, D), in order
        return embeds.masked_scatter(is_image[..., None], features.to(embeds.dtype))
