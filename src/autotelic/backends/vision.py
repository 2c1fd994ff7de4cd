"""Vision-language policies: an image is a run of token ids past the vocabulary, one per image feature.

An observation names an image with a marker in its text, ``<image:PATH>`` (``image_marker`` saves a PNG under the
cache, content-addressed, and returns its marker: the web environment's screenshots, ``envs/web/env.py``). A
vision-language policy (``HFPolicy`` on an Idefics3/SmolVLM directory, whose text model uses 1-D positions)
tokenizes a marker as the model's image span, ``<fake_token_around_image><global-img>``, then ``image_seq_len``
ids ``base + k * image_seq_len + j`` (the j-th feature of the k-th image the policy has seen, ``base`` the
embedding's rows), then ``<fake_token_around_image>``. The text embedding, hooked (``ImageTokens.install``),
embeds those ids as the image's features, computed by the vision tower and connector at that forward, so
gradients reach them. Everything downstream stays token lists: prompts shared by a group, prefix caches, masks
and checkpoints need no image side channel, and one image seen twice is the same tokens. Images are observations,
so their tokens are never trained (mask 0); they are never sampled (the head's logits cover the vocabulary only).

Each image is one tile at ``vision_config.image_size`` (no splitting into sub-images): a screenshot costs
``image_seq_len`` tokens (64 for SmolVLM's 512-pixel tiles).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import torch

from autotelic.backends.embedded import cache_root

IMAGE_MARKER = re.compile(r"<image:([^<>\n]+)>")
AROUND_IMAGE, GLOBAL_IMAGE, IMAGE = "<fake_token_around_image>", "<global-img>", "<image>"


def image_marker(png: bytes) -> str:
    """The marker naming ``png``, saved once under the cache (``images/<sha256>.png``)."""
    path = cache_root() / "images" / f"{hashlib.sha256(png).hexdigest()}.png"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(".partial")
        staging.write_bytes(png)
        staging.rename(path)  # atomic: a reader never sees half an image
    return f"<image:{path}>"


class ImageTokens:
    """The images a policy has seen, as token ids past the vocabulary, and their features (module docstring)."""

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
        self.index: dict[str, int] = {}  # image path -> k
        self.pixels: list[torch.Tensor] = []  # k -> (3, size, size)
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
        """The image span of the image at ``path`` (read and preprocessed the first time)."""
        if path not in self.index:
            from PIL import Image

            try:
                with Image.open(path) as image:
                    pixels = self.processor(images=[[image.convert("RGB")]], return_tensors="pt")["pixel_values"]
            except OSError as error:
                raise ValueError(f"image {path} cannot be read ({error}); the observation names a missing image")
            self.index[path] = len(self.pixels)
            self.pixels.append(pixels[0, 0])
        start = self.base + self.index[path] * self.seq_len
        return [self.around, self.global_image, *range(start, start + self.seq_len), self.around]

    def features(self, images: list[int]) -> torch.Tensor:
        """(len(images), seq_len, D): each image's features in the text model's embedding space."""
        pixels = torch.stack([self.pixels[k] for k in images])[:, None].to(self.embedding.weight.device)
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
        images, inverse = (offsets // self.seq_len).unique(return_inverse=True)
        features = self.features(images.tolist())[inverse, offsets % self.seq_len]  # (n, D), in order
        return embeds.masked_scatter(is_image[..., None], features.to(embeds.dtype))
