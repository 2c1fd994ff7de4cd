"""Which tasks a run trains on: the curriculum section, with eva's prompt evolution, ReST-GRPO's partial-solution
prompts, guided hints and memory replay under it, and the columns of a user's data. Each validates itself in ``problems``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from autotelic.config.rules import at_least_zero, band, count, filled, finite, fraction, positive, rule

DATA_COLUMNS = ("prompt", "answer", "tests", "level", "difficulty")
"""The columns of a user's data that autotelic reads (``tasks/files.py``); ``curriculum.columns`` renames them."""
HINT_MODES = ("prompt", "demonstration")
"""How guided rollouts guide (``curriculum.hints.mode``): a hint in the question, or a played demonstration."""


def _column(key: str, role: str, column: Any) -> list[str]:
    """One entry of a column mapping: a column autotelic reads, mapped to a name in the data."""
    if role not in DATA_COLUMNS:
        return [f"{key} maps unknown column '{role}'; valid: {', '.join(DATA_COLUMNS)}"]
    return rule(isinstance(column, str) and bool(column), f"{key}.{role}", column, "be a column name")



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
    model: str = "base"
    """The evolver: base (a frozen copy of the starting model: it cannot decay with training), policy (the model
    being trained) or a local model directory (frozen)."""
    operations: list[str] = field(default_factory=lambda: ["harder", "specific", "topic"])
    """Evol-Instruct rewrites, used in turn: harder, specific, topic."""
    temperature: float = 0.9
    """Sampling temperature of the evolver's rewrites."""
    max_new_tokens: int = 64
    """Tokens a rewritten prompt may take at most."""
    train: bool = False
    """Train the evolver too (eva's creator as a learner): each seed is rewritten ``variants`` times from one request,
    each rewrite rewarded with the solver's informativeness on it (0 when rejected), and at the next evolution the
    evolver takes an update on them by the run's algorithm, with its own optimizer; needs an evolver of its own
    (``model`` base or a directory). Checkpointed with the curriculum."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.every", self.every, 0), *fraction(f"{key}.fraction", self.fraction, open_low=True),
                *count(f"{key}.variants", self.variants), *fraction(f"{key}.old_fraction", self.old_fraction),
                *filled(f"{key}.model", self.model), *filled(f"{key}.operations", self.operations),
                *positive(f"{key}.temperature", self.temperature),
                *count(f"{key}.max_new_tokens", self.max_new_tokens),
                *([f"{key}.train trains the evolver as a model of its own, but {key}.model=policy is the solver: "
                   f"set {key}.model=base (a copy of the starting model) or a model directory"]
                  if self.train and self.model == "policy" else [])]


@dataclass
class PrefixConfig:
    """ReST-GRPO: the best answers of problems whose groups spread are cut at code lines into partial-solution
    prompts that the policy continues (the verifier scores prefix + continuation; only the continuation
    trains). The defaults are the official ReST-RL code's."""

    fraction: float = 0.0
    """Share of each step's tasks that are partial-solution prompts (0 disables)."""
    per_line: float = 0.5
    """Prefixes drawn per code line of the best answer (rounded up), with replacement."""
    decay: float = 0.95
    """The prefix of k lines is drawn with weight decay**(k - 1): early cuts (long continuations) preferred."""
    min_reward: float = 0.9
    """A problem is cut when its best answer's reward reaches this."""
    min_std: float = 0.05
    """A problem is cut when its group's reward std reaches this (a group all right or all wrong is not)."""
    iteration_steps: int = 0
    """ReST-GRPO's iterations instead of the online mix: every this many steps, the problems whose groups spread
    and the prefixes cut from them in those steps are assembled, shuffled, and served first for the next as many
    steps (one epoch at most); 0: the online mix (``fraction`` of each step)."""

    def problems(self, key: str) -> list[str]:
        return [*fraction(f"{key}.fraction", self.fraction), *count(f"{key}.iteration_steps", self.iteration_steps, 0),
                *rule(self.per_line > 0, f"{key}.per_line", self.per_line, "be above 0"),
                *fraction(f"{key}.decay", self.decay, open_low=True), *finite(f"{key}.min_reward", self.min_reward),
                *at_least_zero(f"{key}.min_std", self.min_std)]


@dataclass
class HintConfig:
    """Guided rollouts (``curricula/hints.py``): a task failed by its whole group comes back guided by its reference
    solution (a data column; web tasks carry their scripted actions): the start of it written into the question, or
    (episodes) played whole by one episode of the group; the share of guided tasks decays each step."""

    fraction: float = 0.0
    """Share of each step's tasks served with hints at the first step (0 disables); it decays by ``decay``."""
    column: str = "solution"
    """The data column holding each task's reference solution; ``answer``: the task's own answer (any family
    with one, e.g. the default recipe's numbers)."""
    share: float = 0.5
    """Part of the reference given as the hint: its first lines (or words, for one line)."""
    decay: float = 0.9
    """The hinted share shrinks by this factor every step."""
    max_reward: float = 0.0
    """A group whose best reward is at most this gets a hinted retry."""
    mode: str = "prompt"
    """"prompt": the first ``share`` of the reference is written into the question; "demonstration": the question
    comes back unchanged and one sample of its group is the whole reference (in episodes: played a line a turn, as
    actions), trained like the policy's own (for what the policy never samples, e.g. a web agent's answer or the
    bare number a strict verifier asks for)."""
    stuck_window: int = 0
    """0: every failed task is guided; N: only the tasks of a family none of whose last N unguided groups had a
    reward above ``max_reward`` (stuck at zero: a family the policy solves at times learns from its own samples,
    and its queued retries are dropped)."""

    def problems(self, key: str) -> list[str]:
        return [*rule(self.mode in HINT_MODES, f"{key}.mode", self.mode, f"be one of {', '.join(HINT_MODES)}"),
                *count(f"{key}.stuck_window", self.stuck_window, 0),
                *fraction(f"{key}.fraction", self.fraction), *filled(f"{key}.column", self.column),
                *fraction(f"{key}.share", self.share, open_low=True, open_high=True),
                *fraction(f"{key}.decay", self.decay, open_low=True), *finite(f"{key}.max_reward", self.max_reward)]


@dataclass
class MemoryConfig:
    """Memory replay (``curricula/memory.py``): problems the policy solved, with its own best answer, are written
    before the questions of later, similar problems as worked examples."""

    fraction: float = 0.0
    """Share of each step's tasks served with examples from the memory (0: none; with ``at_eval`` the memory
    still banks, so training is the same as without it and only the held-out set is answered with it)."""
    examples: int = 2
    """Solved problems shown per served task: the most similar questions (cosine of word counts)."""
    min_reward: float = 1.0
    """A group whose best reward reaches this puts its question and best answer in the memory."""
    capacity: int = 256
    """Problems remembered; the oldest go first."""
    max_chars: int = 400
    """Characters of a remembered answer at most."""
    at_eval: bool = False
    """After training, also evaluate the held-out set with each question served its nearest solved training
    problems from the memory, as an agent that keeps its memory would answer (held-out problems are never banked):
    eval_after_memory.jsonl and the summary's ``memory_eval``; the run's own accuracy stays the weights' alone."""

    def problems(self, key: str) -> list[str]:
        return [*fraction(f"{key}.fraction", self.fraction), *count(f"{key}.examples", self.examples),
                *finite(f"{key}.min_reward", self.min_reward), *count(f"{key}.capacity", self.capacity),
                *count(f"{key}.max_chars", self.max_chars)]


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
    """Difficulty levels drawn from each family."""
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
    prefixes: PrefixConfig = field(default_factory=PrefixConfig)
    """ReST-GRPO's partial-solution prompts (off unless prefixes.fraction > 0)."""
    hints: HintConfig = field(default_factory=HintConfig)
    """Guided rollouts from reference solutions (off unless hints.fraction > 0)."""
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    """Memory replay of solved problems as worked examples (off unless memory.fraction > 0 or memory.at_eval)."""
    failure_fraction: float = 0.0
    """WebRL-style: share of each step's tasks made from failed ones, cut at the first progress milestone
    no sample reached (web tasks; 0 disables)."""

    def problems(self, key: str) -> list[str]:
        return [*filled(f"{key}.families", self.families), *filled(f"{key}.levels", self.levels),
                *[p for role, column in self.columns.items() for p in _column(f"{key}.columns", role, column)],
                *[p for level in self.levels for p in count(f"{key}.levels entry", level)],
                *positive(f"{key}.temperature", self.temperature), *fraction(f"{key}.ema", self.ema, open_low=True),
                *fraction(f"{key}.prior_pass_rate", self.prior_pass_rate),
                *fraction(f"{key}.decay", self.decay, open_high=True), *count(f"{key}.pool_size", self.pool_size),
                *band(f"{key}.gate", self.gate), *self.evolve.problems(f"{key}.evolve"),
                *self.prefixes.problems(f"{key}.prefixes"), *self.hints.problems(f"{key}.hints"),
                *self.memory.problems(f"{key}.memory"),
                *fraction(f"{key}.failure_fraction", self.failure_fraction), *self._test_time_problems(key)]

    def _test_time_problems(self, key: str) -> list[str]:
        """test_time's pool is the held-out prompts as they are: no wrapper may rewrite or add to them."""
        if self.name != "test_time":
            return []
        prefixes = self.prefixes
        wrappers = {"prefixes.fraction": prefixes.fraction, "prefixes.iteration_steps": prefixes.iteration_steps,
                    "hints.fraction": self.hints.fraction, "memory.fraction": self.memory.fraction,
                    "memory.at_eval": self.memory.at_eval, "failure_fraction": self.failure_fraction}
        return [f"{key}.name=test_time trains on the held-out prompts as they are, so {key}.{option} would be "
                f"ignored: turn it off or pick another curriculum" for option, on in wrappers.items() if on]
