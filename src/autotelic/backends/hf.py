"""Local transformers policy backend: the CPU default, also fine on one GPU.

Two things make it several times faster than a generic trainer on CPU:
- prefix sharing: each prompt is run once, its KV cache repeated for the group's n samples, in
  generation (``sampling.py``) and in the training forward (``forward.py``; autograd flows through
  the repeat, so gradients are exact, while prompt compute drops n-fold);
- no wasted work: finished samples leave the decoding batch, and the LM head (a fifth of this
  model's FLOPs) is applied only at completion positions.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import re
import shutil
import warnings
import weakref
from dataclasses import replace
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from autotelic.backends import Completion, DecoderStops, PolicyBackend, PrefixCache
from autotelic.backends.batching import group_sizes
from autotelic.backends.embedded import ModelFileError
from autotelic.backends.forward import checkpoint_completion_layers, completion_logits, completion_logprobs
from autotelic.backends.model_dir import is_vision_model, read_chat_template, resolve_model_dir
from autotelic.backends.sampling import sample_groups
from autotelic.backends.vision import ImageTokens
from autotelic.checkpoint import publish_dir
from autotelic.config import ModelConfig

# transformers 5.24 renamed the KV cache argument and output `past_key_values` to `cache` and warns on every
# forward that uses the old name; 5.0, the oldest we support, knows only the old name, so we keep it and
# silence those notes (a FutureWarning each step, a log line once) for every caller, not only the CLI.
warnings.filterwarnings("ignore", message="`past_key_values` is deprecated", category=FutureWarning)
logging.getLogger("transformers.utils.generic").addFilter(lambda record: "`past_key_values`" not in record.getMessage())


def keep_freed_memory_in_process() -> None:
    """Ask glibc to reuse freed memory instead of returning it to the OS after every tensor.

    Training allocates and frees the same activation buffers each step; with glibc's defaults the
    large ones are fresh mmaps whose page faults cost ~15% of a CPU step. The process keeps its
    peak footprint instead. No-op where glibc is absent.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name is not None else None
    if libc is None or not hasattr(libc, "mallopt"):
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024)  # glibc's maximum: smaller buffers come from the heap
    libc.mallopt(m_trim_threshold, 2**30)
    libc.mallopt(m_top_pad, 256 * 1024 * 1024)


def chat_messages(user_message: str | list[dict[str, str]], system_prompt: str | None = None) -> list[dict[str, str]]:
    """The messages a prompt is: one user message, or whole chat messages (``Task.chat``); ``system_prompt``
    goes first unless the messages bring their own."""
    messages = [{"role": "user", "content": user_message}] if isinstance(user_message, str) else list(user_message)
    if system_prompt is not None and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def chat_text(tokenizer, user_message: str | list[dict[str, str]], response_prefix: str = "",
              system_prompt: str | None = None) -> str:
    """The text of a chat (``chat_messages``) up to the assistant's turn, then ``response_prefix``."""
    messages = chat_messages(user_message, system_prompt)
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + response_prefix


def encode_chat(tokenizer, user_message: str | list[dict[str, str]], response_prefix: str = "",
                system_prompt: str | None = None) -> list[int]:
    """Token ids of ``chat_text``."""
    return tokenizer(chat_text(tokenizer, user_message, response_prefix, system_prompt),
                     add_special_tokens=False).input_ids


# The weights' dtype of each ``model.dtype``; bf16-mixed keeps float32 weights and computes under bf16 autocast.
DTYPES = {"float32": torch.float32, "bf16-mixed": torch.float32, "bfloat16": torch.bfloat16, "auto": "auto"}


def resolve_device(name: str) -> torch.device:
    """``model.device`` as a torch device; a GPU asked for where none is visible is named."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ModelFileError(f"model.device={name}: not a device ({error})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelFileError(f"model.device={name}: no CUDA GPU is visible (use cpu or auto)")
    return device


@contextmanager
def settings_kept(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Loading an optimizer's state inside brings back the learning rate it was saved with: the run's own
    (a resume's ``algorithm.lr=`` after a divergence) is put back."""
    settings = [{key: group[key] for key in ("lr", "weight_decay")} for group in optimizer.param_groups]
    yield
    for group, own in zip(optimizer.param_groups, settings):
        group.update(own)


class HFPolicy:
    """A causal LM from a local directory, optionally wrapped with LoRA adapters, plus its optimizer."""

    # every model this process holds (the trained ones and frozen role copies), for the run's memory estimate
    loaded: weakref.WeakSet[HFPolicy] = weakref.WeakSet()

    def __init__(self, config: ModelConfig, lr: float = 1e-5, weight_decay: float = 0.0,
                 max_grad_norm: float = 1.0, seed: int = 0, stops: DecoderStops = DecoderStops()):
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

        cores = len(os.sched_getaffinity(0))  # more threads than the cores we may run on only contend for them
        torch.set_num_threads(min(config.threads or cores, cores))
        keep_freed_memory_in_process()
        # Values below 1e-38 (tiny attention weights, small gradients) take a slow microcode path on
        # x86; flushing them to zero changes nothing measurable and speeds a CPU step by ~10%.
        torch.set_flush_denormal(True)
        self.config = config
        self.model_dir = resolve_model_dir(config.path)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
            vision = is_vision_model(self.model_dir)
            loader = AutoModelForImageTextToText if vision else AutoModelForCausalLM
            model = loader.from_pretrained(self.model_dir, dtype=DTYPES[config.dtype])
        except Exception as error:  # corrupt weights surface as OSError, ValueError or safetensors' own errors
            raise ModelFileError(f"cannot load model from {self.model_dir}: {error}".splitlines()[0]) from error
        if config.chat_template is not None:
            self.tokenizer.chat_template = read_chat_template(config.chat_template)
        if config.lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(
                r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                target_modules=list(config.lora_targets), task_type="CAUSAL_LM",
            ))
        self.device = resolve_device(config.device)
        self.model = model.to(self.device)
        self.model.train()
        # a vision-language model reads images as tokens past its vocabulary (vision.py)
        self.images = ImageTokens(self.causal_lm, self.tokenizer) if vision else None
        if self.images is not None:
            self.images.install()
        if config.gradient_checkpointing:
            checkpoint_completion_layers(self.causal_lm)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        eos = {self.tokenizer.eos_token_id}
        generation_eos = getattr(model.generation_config, "eos_token_id", None)
        eos |= set(generation_eos) if isinstance(generation_eos, list) else {generation_eos}
        self.eos_ids = torch.tensor(sorted(e for e in eos if e is not None), device=self.device)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        # The fused kernel updates all 135M parameters in one pass: ~0.1 s instead of ~0.5 s on 2 cores.
        self.optimizer = torch.optim.AdamW(self.trainable, lr=lr, weight_decay=weight_decay, fused=True)
        self.max_grad_norm = max_grad_norm
        self.frozen = lr == 0  # never updated (a CoMAS agent at learning rate 0): it plays, nothing trains it
        self.grad_norm_ceiling = math.inf  # a norm above it is a spike: the trainer sets it from the recent norms
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.version = 0
        self.stops = stops  # in-trajectory early stops: of looping samples, of complete answers
        self._frozen_reference: torch.nn.Module | None = None
        self._ids_containing: dict[str, list[int]] = {}
        HFPolicy.loaded.add(self)

    # ---- text <-> tokens -------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """``text``'s token ids; with a vision-language model, each image marker as its image's tokens."""
        if self.images is not None:
            return self.images.tokenize(self.tokenizer, text)
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def encode_prompt(self, user_message: str | list[dict[str, str]], response_prefix: str = "") -> list[int]:
        """The chat prompt up to the assistant's turn, plus ``response_prefix`` as the reply's start."""
        return self.tokenize(chat_text(self.tokenizer, user_message, response_prefix, self.config.system_prompt))

    def encode_completion(self, text: str) -> list[int]:
        """An assistant reply as the model would have generated it: its tokens, then end-of-turn."""
        return self.tokenize(text) + [self.tokenizer.eos_token_id]

    def encode_followup(self, observation: str, after_eos: bool, response_prefix: str = "") -> list[int]:
        """Tokens that close the model's turn (unless it already ended with EOS), add ``observation`` as
        the next user message and open the next assistant turn (with ``response_prefix`` already written):
        what a multi-turn episode appends."""
        marker = "\x00TURN\x00"
        messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": marker},
                    {"role": "user", "content": observation}]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        tail = text[text.index(marker) + len(marker):]
        eos = self.tokenizer.eos_token or ""
        if after_eos and eos and tail.startswith(eos):
            tail = tail[len(eos):]
        return self.tokenize(tail + response_prefix)

    def decode(self, token_ids: list[int]) -> str:
        """The text of ``token_ids``, images left out."""
        if self.images is not None:
            token_ids = [t for t in token_ids if t < self.images.base]
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def token_ids_containing(self, text: str) -> list[int]:
        """Every vocabulary entry whose text contains ``text`` (e.g. all tokens that end a line)."""
        if text not in self._ids_containing:
            pieces = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
            self._ids_containing[text] = [i for i, piece in enumerate(pieces) if piece is not None
                                          and text in self.tokenizer.convert_tokens_to_string([piece])]
        return self._ids_containing[text]

    # ---- model pieces ----------------------------------------------------------------------
    @property
    def causal_lm(self) -> torch.nn.Module:
        """The transformers CausalLM (LoRA layers injected in place when LoRA is on)."""
        return self.model.get_base_model() if self.config.lora else self.model

    def _reference_lm(self) -> torch.nn.Module:
        if self.config.lora:
            return self.causal_lm  # called under disable_adapter(): the base weights are the reference
        if self._frozen_reference is None:
            self._frozen_reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        return self._frozen_reference

    # ---- generation ------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], n: int | Sequence[int], max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
                 stop_token_ids: Sequence[int] = (), prefixes: PrefixCache | None = None,
                 ) -> list[list[Completion]]:
        """n completions per prompt (or n[i] for prompt i). Returns one list of Completions per prompt.
        A completion also ends after any of ``stop_token_ids`` (then ``finished`` is False). ``prefixes``: the
        prompts continue the last call's sequences (``sampling.sample_groups`` reuses their KV cache)."""
        with self._precision():
            return sample_groups(self.causal_lm, prompts, group_sizes(n, len(prompts)), max_new_tokens,
                                 pad_id=self.pad_id, eos_ids=self.eos_ids, generator=self.generator,
                                 device=self.device, temperature=temperature, top_p=top_p, greedy=greedy,
                                 stop_token_ids=stop_token_ids, stop_repeats=self.stops.repeats,
                                 answered=self._answered if self.stops.pattern else None, prefixes=prefixes)

    def _answered(self, token_ids: list[int]) -> bool:
        """Whether the text of ``token_ids`` holds a complete answer: it matches ``control.stop_pattern`` (re
        caches the compiled pattern)."""
        return re.search(self.stops.pattern, self.decode(token_ids)) is not None

    def _precision(self) -> torch.autocast:
        """The forwards' precision: bf16 autocast under ``model.dtype=bf16-mixed`` (backward follows the forward's
        dtypes outside it), else the weights' own."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.dtype == "bf16-mixed")

    # ---- training forward ------------------------------------------------------------------
    def completion_logprobs(self, prompts: list[list[int]], completions: list[list[int]], n: int | Sequence[int],
                            temperature: float = 1.0, reference: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of each completion token, (B, T) with B = sum of group sizes, and the (B, T) mask.

        The prompt runs once per group; its KV cache is repeated per sample (exact gradients).
        ``reference=True`` scores under the frozen reference policy, without gradients.
        """
        sizes = group_sizes(n, len(prompts))
        if len(completions) != sum(sizes):
            raise ValueError(f"{len(completions)} completions for {len(prompts)} prompts with group sizes {sizes}")
        n = sizes
        if reference:
            with torch.no_grad():
                if self.config.lora:
                    with self.model.disable_adapter():
                        return self._logprobs(self._reference_lm(), prompts, completions, n, temperature)
                return self._logprobs(self._reference_lm(), prompts, completions, n, temperature)
        return self._logprobs(self.causal_lm, prompts, completions, n, temperature)

    @torch.no_grad()
    def self_certainty(self, prompts: list[list[int]], completions: list[list[int]],
                       n: int | Sequence[int]) -> list[float]:
        """Each completion's mean per-token KL(uniform || p), p the policy's next-token distribution
        (Intuitor's self-certainty, Zhao et al. 2025): high where the policy is confident."""
        with self._precision():
            logits, _, mask = completion_logits(self.causal_lm, prompts, completions, group_sizes(n, len(prompts)),
                                                1.0, self.pad_id, self.device)
        per_token = -math.log(logits.shape[-1]) - torch.log_softmax(logits, dim=-1).mean(-1)  # (N,)
        rows = torch.zeros(mask.shape, dtype=per_token.dtype, device=mask.device).masked_scatter(mask, per_token)
        return (rows.sum(1) / mask.sum(1).clamp(min=1)).tolist()

    def _logprobs(self, lm: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]],
                  sizes: list[int], temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        with self._precision():
            return completion_logprobs(lm, prompts, completions, sizes, temperature, self.pad_id, self.device)

    # ---- updates and state -----------------------------------------------------------------
    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def optimizer_step(self) -> dict[str, float]:
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in self.trainable if p.grad is not None])
        if hasattr(grad_norm, "full_tensor"):  # a DTensor: FSDP ranks (dist/fsdp.py) clip by the norm over all shards
            grad_norm = grad_norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(self.trainable, self.max_grad_norm, grad_norm)
        if not torch.isfinite(grad_norm) or grad_norm.item() > self.grad_norm_ceiling:
            self.zero_grad()
            raise FloatingPointError(f"the gradient norm is {grad_norm.item():.4g}" + (
                " (not finite)" if not torch.isfinite(grad_norm)
                else f", far above its running range (ceiling {self.grad_norm_ceiling:.4g})"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.version += 1
        return {"grad_norm": float(grad_norm)}

    def trainable_state(self) -> dict[str, torch.Tensor]:
        if self.config.lora:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.model)
        return self.model.state_dict()

    def training_state(self) -> dict[str, Any]:
        """What a resume needs to continue training this model exactly: weights, optimizer, version, sampler."""
        return {"trainable": self.trainable_state(), "optimizer": self.optimizer.state_dict(),
                "policy_version": self.version, "generator": self.generator.get_state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.load_trainable_state(state["trainable"])
        with settings_kept(self.optimizer):
            self.optimizer.load_state_dict(state["optimizer"])
        self.version = state["policy_version"]
        self.generator.set_state(state["generator"])

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        mismatch = _state_mismatch(state, self.trainable_state())
        if mismatch is not None:  # one line instead of torch's list of every size mismatch
            raise ModelFileError(f"saved weights do not fit this model ({mismatch}): model.path, model.lora or "
                                 "model.lora_rank differ from those of the run that saved them")
        if self.config.lora:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, state)
        else:
            self.model.load_state_dict(state)

    def export(self, directory: Path) -> None:
        """Save a plain Hugging Face model (LoRA merged) that transformers loads directly. It is written beside
        ``directory`` and renamed into place: a kill never leaves a half-written model that looks complete."""
        if directory.is_dir() and any(directory.iterdir()) and not (directory / "config.json").is_file():
            raise ModelFileError(f"{directory} holds files but no model, and exporting replaces it: pick another "
                                 "destination")
        model = copy.deepcopy(self.model).merge_and_unload() if self.config.lora else self.model
        staging = directory.with_name(directory.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(staging)
        self.tokenizer.save_pretrained(staging)
        publish_dir(staging, directory)


def _state_mismatch(saved: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> str | None:
    """How a saved state differs from the model's own in names or shapes (the first difference); None if it fits."""
    missing, extra = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
    if missing:
        return f"{len(missing)} tensors missing, e.g. {missing[0]}"
    if extra:
        return f"{len(extra)} tensors this model lacks, e.g. {extra[0]}"
    for name, tensor in expected.items():
        if saved[name].shape != tensor.shape:
            return f"{name} has shape {tuple(saved[name].shape)}, this model's {tuple(tensor.shape)}"
    return None


NAMED_MODELS = ("policy", "base")
"""The names ``role_backend`` takes besides a model directory (nothing to check on disk)."""


def role_backend(name: str, policy: PolicyBackend, model: ModelConfig, seed: int,
                 shared: dict[str, PolicyBackend]) -> PolicyBackend:
    """The model that plays a role beside the policy (a judge, the prompt evolver, an operator role): ``policy``,
    the model being trained; ``base``, a frozen copy of the starting model (it cannot drift or decay with
    training, and needs no other download); or a local model directory. Roles naming the same model share it
    (``shared``); none of these is ever trained."""
    if name == "policy":
        return policy
    if name not in shared:  # another directory takes none of the policy's prompt settings
        settings = replace(model, lora=False) if name == "base" else ModelConfig(
            path=name, threads=model.threads, device=model.device, dtype=model.dtype)
        shared[name] = HFPolicy(settings, seed=seed)
    return shared[name]
