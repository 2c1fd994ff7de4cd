"""A process's memory: the peak the step metrics report (the driver's, each Ray actor's, each train rank's),
and the estimate of what a run needs, checked against the machine's available memory at start."""

from __future__ import annotations

import resource
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil
import torch

from autotelic.config import RunConfig

if TYPE_CHECKING:
    from autotelic.backends.hf import HFPolicy

MIB = 2**20
GIB = 2**30
# What the interpreter, torch and transformers hold before any model or tensor (the embedded model's runs:
# ~0.45 GB resident after imports and the tokenizer).
RUNTIME_BYTES = 450 * MIB
# Numbers an update keeps per completion token and decoder layer: HIDDEN_UNITS of the hidden size (the layer's
# input, norms, q/k/v/o, residuals) and MLP_UNITS of the intermediate size (gate, up, activation, product).
HIDDEN_UNITS, MLP_UNITS = 10, 4
# Full-vocabulary fp32 rows alive per completion token at the LM head's peak: the logits, their gradient and
# the gathered one's.
LOGIT_ROWS = 3


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (what an out-of-memory killer judges; on a CPU it
    includes activations)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def memory_metrics(device: str) -> dict[str, float]:
    """This process's peak resident memory so far, and on a CUDA device the allocator's peak since the last call
    (the last step's row), which is then reset."""
    metrics = {"perf/peak_rss_mib": peak_rss_mib()}
    if device.startswith("cuda"):
        metrics["perf/peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
        torch.cuda.reset_peak_memory_stats()
    return metrics


@dataclass(frozen=True)
class UpdateShape:
    """What one forward/backward of the update holds at once."""

    completion_tokens: int  # of one micro-batch
    logit_tokens: int  # completion tokens whose full-vocabulary logits are alive at once
    checkpointed: bool  # model.gradient_checkpointing: a layer keeps only its input


@dataclass(frozen=True)
class MemoryNeed:
    """A run's resident memory at its peak (the update's backward), in bytes, by part."""

    weights: int  # every model the run holds: the trained ones and frozen role copies
    gradients: int  # of the trained parameters
    optimizer: int  # AdamW's two moments of the trained parameters
    activations: int  # the largest trained model's micro-batch
    runtime: int = RUNTIME_BYTES

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.runtime


def full_finetune_floor(parameters: int) -> int:
    """Bytes no full fine-tuning in fp32 with AdamW goes under: weights, gradients and the two moments."""
    return 4 * 4 * parameters


def _bytes(parameters: Sequence[torch.nn.Parameter]) -> int:
    return sum(p.numel() * p.element_size() for p in parameters)


def _activations(lm: torch.nn.Module, shape: UpdateShape) -> int:
    config = lm.config.get_text_config()
    hidden, layers = config.hidden_size, config.num_hidden_layers
    per_layer = HIDDEN_UNITS * hidden + MLP_UNITS * config.intermediate_size
    # checkpointed: each layer keeps its input, and one layer at a time is replayed whole
    kept = layers * hidden + per_layer if shape.checkpointed else layers * per_layer
    vocabulary = lm.get_output_embeddings().weight.shape[0]
    return 4 * (shape.completion_tokens * kept + LOGIT_ROWS * shape.logit_tokens * vocabulary)


def estimate_need(trained: Sequence[torch.nn.Module], frozen: Sequence[torch.nn.Module],
                  shape: UpdateShape) -> MemoryNeed:
    """What a run holding ``trained`` models (causal LMs, LoRA adapters in place) and ``frozen`` copies needs
    at its update's peak."""
    weights = sum(_bytes(list(model.parameters())) for model in [*trained, *frozen])
    trainable = sum(_bytes([p for p in model.parameters() if p.requires_grad]) for model in trained)
    activations = max((_activations(model, shape) for model in trained), default=0)
    return MemoryNeed(weights=weights, gradients=trainable, optimizer=2 * trainable, activations=activations)


def shortage_warning(need: MemoryNeed, available: int) -> str | None:
    """One line when ``available`` bytes fall short of ``need``, None otherwise."""
    if available >= need.total:
        return None
    return (f"warning: this run needs about {need.total / GIB:.1f} GiB of memory ({need.weights / GIB:.1f} "
            f"weights, {(need.gradients + need.optimizer) / GIB:.1f} gradients and optimizer, "
            f"{need.activations / GIB:.1f} activations) and {available / GIB:.1f} GiB is available: it may "
            f"be killed for memory; model.lora=true or a smaller algorithm.micro_batch_tokens needs less")


def update_shape(config: RunConfig) -> UpdateShape:
    """The largest micro-batch a step of ``config`` trains on: its groups, every sample at the length cap."""
    from autotelic.backends.forward import LOGIT_CHUNK_TOKENS

    algo = config.algorithm
    groups = min(config.control.tasks_per_step, algo.micro_batch_groups)
    tokens = groups * config.generate.group_size * config.control.max_new_tokens
    if algo.micro_batch_tokens is not None:
        tokens = min(tokens, algo.micro_batch_tokens)
    return UpdateShape(tokens, min(tokens, LOGIT_CHUNK_TOKENS), config.model.gradient_checkpointing)


def holds_reference(config: RunConfig) -> bool:
    """Whether full fine-tuning keeps a frozen copy of the starting policy to score against (``HFPolicy``'s
    reference): a KL term, or sigmoid DPO. LoRA's reference is its own base weights, adapters off."""
    algo = config.algorithm
    dpo = algo.name in ("online_dpo", "offline_dpo") and algo.dpo_loss == "sigmoid"
    return not config.model.lora and (algo.beta > 0 or dpo)


def run_need(config: RunConfig, agents: Sequence[HFPolicy]) -> MemoryNeed:
    """What a run needs at its peak, from the models it loaded: ``agents`` train; every other model this
    process holds (judges, the evolver, operator roles: ``HFPolicy.loaded``) and a reference copy are
    frozen."""
    from autotelic.backends.hf import HFPolicy

    trained = [agent.causal_lm for agent in agents]
    frozen = [held.causal_lm for held in HFPolicy.loaded if all(held is not agent for agent in agents)]
    references = trained if holds_reference(config) else []
    return estimate_need(trained, [*frozen, *references], update_shape(config))


def warn_if_short(config: RunConfig, agents: Sequence[HFPolicy]) -> None:
    """Print one line when the machine has less memory available than the run needs (``run_need``)."""
    line = shortage_warning(run_need(config, agents), psutil.virtual_memory().available)
    if line is not None:
        print(line)
