"""The sections of a training step: the model, how samples are generated, filtered and budgeted, replayed, the
algorithm and the training run (which tasks the curriculum draws: ``curriculum.py``). Each validates itself in
``problems``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from autotelic.config.rules import at_least_zero, band, compiles, count, filled, finite, fraction, positive, rule


DEVICE = re.compile(r"cpu|auto|cuda(:\d+)?|mps")


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The attention and MLP projections of Llama/Qwen-style decoders: where LoRA adapters go by default."""


@dataclass
class ModelConfig:
    path: str | None = None
    """Local Hugging Face model directory; None uses the embedded SmolLM2-135M-Instruct; random:<shape> (e.g.
    random:qwen2-0.5b) a model of that size with random weights, for throughput at a target size."""
    lora: bool = False
    """Train LoRA adapters (peft) instead of all weights; merged into the model on export."""
    lora_rank: int = 32
    """LoRA rank r."""
    lora_alpha: int = 64
    """LoRA scaling alpha (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch's input."""
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))
    """Module names that get LoRA adapters."""
    threads: int | None = None
    """torch intra-op threads, at most the cores this process may run on (its CPU affinity); None: all of them."""
    device: str = "cpu"
    """Where the policy generates and trains: cpu, cuda, cuda:N, or auto (the GPU when one is visible)."""
    system_prompt: str | None = None
    """System message for every prompt; None keeps the chat template's default."""
    chat_template: str | None = None
    """The chat template (Jinja text, or a file holding it) in place of the tokenizer's: for a base model without one,
    or to change how prompts are rendered; it is saved with the exported model. None: the tokenizer's."""
    dtype: Literal["float32", "bf16-mixed", "bfloat16", "auto"] = "float32"
    """Weights and training precision of the policy: float32; bf16-mixed (float32 weights and optimizer, every
    forward in bfloat16 under autocast: mixed precision, as TRL's bf16 on a float32 model); bfloat16 (bf16 weights:
    half the memory, but full fine-tuning rounds away any update under about 1/256 of a weight: on an H200 the
    default recipe's held-out accuracy rose 9% -> 22% in 40 steps where float32's and bf16-mixed's rose to 81%,
    bench/RESULTS.md; with LoRA the trained adapters stay float32) or auto (the checkpoint's own). On a GPU bf16 pays
    only where the update, not sampling, dominates: for the 135M model float32 was the fastest."""

    gradient_checkpointing: bool = True
    """Activation checkpointing in the update: each decoder layer of the completion pass keeps only its input and is
    run again in backward: one more forward for much less memory (the same gradients; the default run's update
    held ~2 GB less, bench/RESULTS.md), most on long samples (web episodes, code) or large micro-batches
    (``algorithm.micro_batch_tokens``). Prefix sharing stays. The GPU recipes turn it off: there memory is plenty
    and the replay costs time."""

    def problems(self, key: str) -> list[str]:
        return [*filled(f"{key}.path", self.path), *filled(f"{key}.chat_template", self.chat_template),
                *count(f"{key}.lora_rank", self.lora_rank),
                *positive(f"{key}.lora_alpha", self.lora_alpha),
                *fraction(f"{key}.lora_dropout", self.lora_dropout, open_high=True),
                *(filled(f"{key}.lora_targets", self.lora_targets) if self.lora else []),
                *count(f"{key}.threads", self.threads),
                *rule(DEVICE.fullmatch(self.device) is not None, f"{key}.device", self.device,
                       "be cpu, cuda, cuda:N, mps or auto")]


@dataclass
class GenerateConfig:
    mode: str = "sample"
    """How a task's group of rollouts is generated: sample (independent samples), tree (samples branched at
    high-entropy tokens, see ``tree``), partial (long samples continued across steps, see ``partial``), episode
    (multi-turn episodes against ``env``, see ``episode``), selfplay (the policy plays both seats of the game
    ``env``, see ``selfplay``), propose (the policy writes tasks and answers them, see ``propose``), discussion
    (CoMAS, see ``discussion``), or a mode an installed package announces (entry point
    'autotelic.generation_modes')."""
    group_size: int = 8
    """Rollouts per task: the group whose rewards are compared. A rollout is the mode's unit: a sample (tree mode
    adds its branches), a game (one transcript per seat, a group per seat), a proposal, a discussion."""
    temperature: float = 0.7
    """Sampling temperature of training rollouts."""
    top_p: float = 1.0
    """Nucleus sampling: the smallest set of tokens holding this much probability."""
    env: str | None = None
    """Episode and selfplay modes: the environment or two-player game: built in (guess_number, calculator, python,
    textarena, web, web_browser, web_screenshot: with page screenshots for a vision-language model.path), an
    installed package's 'autotelic.environments' entry point, or a module with load_environment(**kwargs) by dotted
    path (my_pkg.my_env). Its own tasks and rewards are the defaults of
    curriculum.families/levels and filter.rewards."""
    env_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment's load_environment."""

    def problems(self, key: str) -> list[str]:
        return [*filled(f"{key}.mode", self.mode), *count(f"{key}.group_size", self.group_size),
                *positive(f"{key}.temperature", self.temperature),
                *fraction(f"{key}.top_p", self.top_p, open_low=True), *filled(f"{key}.env", self.env)]


@dataclass
class RewardSpec:
    name: str = "verifier"
    """verifier (the task family's own check), math_verify, unit_tests, majority_vote (label-free, TTRL;
    option novelty_weight: EVOL-RL), self_certainty (label-free: the policy's confidence), judge (an LLM
    with a rubric), reward_model (a local scalar reward model; option model: its directory), format, length, or
    env (the environment's or game's return)."""
    weight: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the reward (e.g. judge: {model: base, rubric: ...}, model base: a frozen copy of the
    starting model, the default; policy: the model being trained; or a directory; format: {pattern: ...})."""

    def problems(self, key: str) -> list[str]:
        return finite(f"{key}.weight", self.weight)


@dataclass
class FilterConfig:
    rewards: list[RewardSpec] = field(default_factory=lambda: [RewardSpec()])
    """Reward functions, summed with their weights."""
    drop_zero_variance: bool = True
    """Drop groups whose rewards are all equal: their group-relative advantages are zero."""
    dynamic_sampling: bool = False
    """DAPO: after filtering, sample new tasks until tasks_per_step groups are kept (or max_rounds)."""
    max_rounds: int = 3
    """Dynamic sampling: generation rounds per step at most."""
    min_reward_std: float = 0.0
    """ReST-GRPO: drop groups whose reward std is below this (e.g. 0.05)."""
    keep_top_fraction: float = 1.0
    """ReST-style selection: keep only this fraction of groups, those of highest reward std."""
    pass_rate_band: list[float] | None = None
    """Learnability gate: keep groups whose mean reward lies in [low, high] (e.g. [0.3, 0.8])."""
    on_reward_error: Literal["stop", "drop"] = "stop"
    """A reward that raises or returns something malformed (the wrong count, a non-number, nan or inf): stop (the run
    ends before the update, in one line naming the function, the task, the problem and your file and line) or drop
    (its group is dropped with that line as a warning, as long as max_dropped_share allows)."""
    max_dropped_share: float = 0.25
    """on_reward_error=drop: the run stops once more than this share of a step's groups are dropped for reward
    errors. A few rare inputs a function cannot score are what drop is for; past a quarter, the function fails on
    a kind of task rather than on odd replies, and the step would train on a skewed remainder: the tasks it scores."""

    def problems(self, key: str) -> list[str]:
        return [*rule(bool(self.rewards), f"{key}.rewards", self.rewards, "name at least one reward (e.g. "
                       "[{name: verifier}])"),
                *[p for i, r in enumerate(self.rewards) for p in r.problems(f"{key}.rewards[{i}]")],
                *count(f"{key}.max_rounds", self.max_rounds),
                *at_least_zero(f"{key}.min_reward_std", self.min_reward_std),
                *fraction(f"{key}.keep_top_fraction", self.keep_top_fraction, open_low=True),
                *band(f"{key}.pass_rate_band", self.pass_rate_band),
                *fraction(f"{key}.max_dropped_share", self.max_dropped_share)]


@dataclass
class ControlConfig:
    max_new_tokens: int = 24
    """Hard cap on completion length (all turns of an episode together)."""
    max_tokens_per_step: int | None = None
    """Completion-token budget per step: fewer tasks are planned, groups past it are dropped."""
    max_samples_per_step: int | None = None
    """Samples generated per step at most, dynamic sampling's refills included (a task is planned at
    generate.group_size samples; tree branches and self-play's second seat come on top): equal sample budgets."""
    tasks_per_step: int = 8
    """Tasks (prompts) per step; rollouts per step = tasks_per_step * generate.group_size."""
    adaptive_group_size: bool = False
    """Spend the step's samples where the estimated pass rate p is near 0.5 (weight p(1-p))."""
    min_group_size: int = 2
    """adaptive_group_size: rollouts per task at least, and at most (max_group_size)."""
    max_group_size: int = 16
    """adaptive_group_size: rollouts per task at most."""
    stop_repeats: int = 0
    """In-trajectory early stop (transformers rollouts and evaluation): a sample ends once its last tokens repeat
    one block of up to 16 tokens this many times in a row, and shorter blocks until they cover 12 tokens (a loop
    it rarely leaves before the length cap; 7777 is a number), cut like one at the cap; 0: never.
    generate/looped_share logs how many."""
    stop_pattern: str = ""
    """In-trajectory early stop once the answer is complete (transformers rollouts, evaluation and search; single
    replies, not episodes): a sample ends, finished, as soon as the text its decoder call wrote matches this regular
    expression (Python re.search; a continued segment, a search step or a reply after a partial-solution prompt is
    matched on its own text), so nothing the verifier would not read is generated or trained; empty: never.
    generate/answered_share logs how many."""
    early_exit_probe: int | None = None
    """Draw this many samples first; a group whose probe rewards are all equal stops there."""
    overlong: Literal["none", "shaping", "mask"] = "none"
    """none, shaping (DAPO soft penalty over the last ``overlong_buffer`` tokens) or mask (truncated
    samples are left out of the loss)."""
    overlong_buffer: int = 8
    """overlong=shaping: the penalty ramps over this many tokens before max_new_tokens."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.max_new_tokens", self.max_new_tokens), *rule(
                    self.stop_repeats == 0 or self.stop_repeats >= 2, f"{key}.stop_repeats", self.stop_repeats,
                    "be 0 (off) or at least 2 (a block and its repeat)"),
                *rule(compiles(self.stop_pattern), f"{key}.stop_pattern", self.stop_pattern,
                      "be a Python regular expression (re) or empty"),
                *count(f"{key}.max_tokens_per_step", self.max_tokens_per_step),
                *count(f"{key}.max_samples_per_step", self.max_samples_per_step),
                *count(f"{key}.tasks_per_step", self.tasks_per_step),
                *count(f"{key}.min_group_size", self.min_group_size),
                *rule(self.max_group_size >= self.min_group_size, f"{key}.max_group_size", self.max_group_size,
                       f"be at least {key}.min_group_size ({self.min_group_size})"),
                *count(f"{key}.early_exit_probe", self.early_exit_probe),
                *count(f"{key}.overlong_buffer", self.overlong_buffer)]


@dataclass
class ReplayConfig:
    name: Literal["on_policy", "buffer"] = "on_policy"
    """on_policy (each group trains once) or buffer (high-variance groups are also replayed later)."""
    capacity: int = 64
    """Groups the buffer holds; the lowest-priority ones go first."""
    max_staleness: int = 4
    """Replayed groups were sampled at most this many policy versions ago."""
    replay_groups: int = 4
    """Groups replayed per step on top of the fresh ones."""
    max_reuse: int = 2
    """Times a group may be replayed."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.capacity", self.capacity), *count(f"{key}.max_staleness", self.max_staleness, 0),
                *count(f"{key}.replay_groups", self.replay_groups, 0), *count(f"{key}.max_reuse", self.max_reuse, 0)]


@dataclass
class AlgorithmConfig:
    name: str = "grpo"
    """grpo, dr_grpo, dapo, gspo, rloo, reinforce_pp, reinforce_pp_baseline, spiral, online_dpo or offline_dpo."""
    lr: float = 2e-5
    """AdamW learning rate."""
    clip_low: float | None = None
    """None: the algorithm's own (0.2; GSPO 3e-4)."""
    clip_high: float | None = None
    """None: the algorithm's own (0.2; DAPO 0.28; GSPO 4e-4)."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] | None = None
    """None: the algorithm's own; token-mean, seq-mean-token-mean or seq-mean-token-sum-norm."""
    beta: float = 0.0
    """KL coefficient to the reference policy (0 disables the reference forward)."""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """k1 (log-ratio) or k3 (Schulman's unbiased, non-negative) estimate of the KL to the reference."""
    rae_decay: float = 0.95
    """spiral: each role's baseline is an average of its rewards, b <- decay * b + (1 - decay) * r."""
    dpo_beta: float = 0.1
    """online_dpo and offline_dpo: the DPO temperature beta (SimPO's beta, typically 2.0-2.5)."""
    dpo_loss: Literal["sigmoid", "simpo"] = "sigmoid"
    """online_dpo and offline_dpo: sigmoid DPO against the reference policy, or SimPO (reference-free, on mean
    token log-probs, with the target margin simpo_gamma)."""
    simpo_gamma: float = 1.0
    """SimPO's target reward margin gamma."""
    dpo_label_smoothing: float = 0.0
    """DPO: probability that a pair's preference is flipped (conservative DPO)."""
    dataset: str | None = None
    """offline_dpo: JSONL of {"prompt", "chosen", "rejected"} (``autotelic pairs`` makes one from a run)."""
    off_policy: Literal["clip", "decoupled"] = "clip"
    """clip (ratio to the sampling policy, clipped) or decoupled (truncated importance weight to the
    sampling policy times a ratio to the current one; for replayed and partial rollouts)."""
    is_cap: float = 2.0
    """decoupled: importance weights are truncated at this value."""
    updates_per_batch: int = 1
    """Gradient steps on each rollout batch; above 1 the clipped ratio matters."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    turn_credit: bool = False
    """Multi-turn episodes: each turn's advantage is its return from there on (its own and later turns' rewards,
    e.g. OpAgent's per-step decision tree), compared with other turns of its group (turn_baseline), instead of one
    per episode."""
    turn_baseline: Literal["group", "state"] = "group"
    """turn_credit: what each turn's return is compared with: every turn of its group (group), or GiGPO's step
    groups (state, Feng et al. 2025): the episode's reward against the group's, plus step_weight x the turn's
    discounted return against those of the group's turns taken from the same environment state."""
    step_weight: float = 1.0
    """turn_baseline=state: the weight of the step-group term beside the episode's."""
    step_discount: float = 0.95
    """turn_baseline=state: the discount of the step returns (GiGPO's gamma; 1: every later reward counts fully)."""
    intra_tree: bool = False
    """Episode trees (episode.tree_roots): each episode's advantage also gets Tree-GRPO's intra-tree term, its
    reward against the mean of the episodes sharing its root (divided by their std for grpo), which contrasts only
    what siblings did after branching (their shared turns' terms cancel)."""
    micro_batch_groups: int = 8
    """Groups per forward/backward at most; gradients accumulate over the batch."""
    micro_batch_tokens: int | None = 4096
    """Token positions per forward/backward at most (a group: its prompt plus samples x its longest completion;
    a group over it is cut into runs of its samples); bounds activation memory for long samples. None: groups
    only. 4096 suits 2 CPU cores; on a GPU use 65536 or more (a Qwen2-0.5B-shaped step on an H200: MFU 2.9% at
    4096, 18.2% at 65536)."""

    def problems(self, key: str) -> list[str]:
        return [*positive(f"{key}.lr", self.lr), *fraction(f"{key}.clip_low", self.clip_low, open_high=True),
                *at_least_zero(f"{key}.clip_high", self.clip_high), *at_least_zero(f"{key}.beta", self.beta),
                *fraction(f"{key}.rae_decay", self.rae_decay), *positive(f"{key}.dpo_beta", self.dpo_beta),
                *at_least_zero(f"{key}.simpo_gamma", self.simpo_gamma),
                *rule(0 <= self.dpo_label_smoothing < 0.5, f"{key}.dpo_label_smoothing", self.dpo_label_smoothing,
                       "lie in [0, 0.5)"),
                *filled(f"{key}.dataset", self.dataset),
                *rule(self.is_cap >= 1, f"{key}.is_cap", self.is_cap, "be at least 1 (a cap on importance weights)"),
                *count(f"{key}.updates_per_batch", self.updates_per_batch),
                *positive(f"{key}.max_grad_norm", self.max_grad_norm),
                *at_least_zero(f"{key}.weight_decay", self.weight_decay),
                *at_least_zero(f"{key}.step_weight", self.step_weight),
                *fraction(f"{key}.step_discount", self.step_discount),
                *count(f"{key}.micro_batch_groups", self.micro_batch_groups),
                *count(f"{key}.micro_batch_tokens", self.micro_batch_tokens)]


@dataclass
class TrainConfig:
    steps: int = 60
    """Training steps (one rollout batch and its update each)."""
    seed: int = 0
    """Seed of the model's sampling, the curriculum's draws and the task streams."""
    max_minutes: float | None = 12.0
    """Stop taking new steps after this many minutes of training (evaluation excluded)."""
    checkpoint_every: int = 10
    """Checkpoint every N steps, in the background. Full fine-tuning writes 1.6 GB (weights + Adam) for
    the embedded model, so the default is sparse; LoRA checkpoints are small enough for every step."""
    keep_checkpoints: int = 2
    """Checkpoints kept; older ones are deleted."""
    export_model: bool = True
    """Write run_dir/model at the end: a plain Hugging Face model (LoRA merged; CoMAS's other agents under
    run_dir/agents). Off for sweeps that keep only their metrics (540 MB and seconds a run for the embedded
    model): ``autotelic export RUN_DIR`` writes the policy later from the last checkpoint."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.steps", self.steps), *positive(f"{key}.max_minutes", self.max_minutes),
                *count(f"{key}.checkpoint_every", self.checkpoint_every),
                *count(f"{key}.keep_checkpoints", self.keep_checkpoints)]
