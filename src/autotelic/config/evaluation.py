"""Held-out evaluation and value-guided search (VM-MCTS): how answers are decoded and judged at test time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from autotelic.config.rules import at_least_zero, count, filled, fraction, positive, rule


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
    """Sampling temperature of expansions and rollouts."""
    cache_mb: int = 1024
    """Memory for the attention state of expanded nodes, the newest kept: an expansion continues its leaf's
    sequence from there instead of computing the prompt and path again (0: nothing kept). On the embedded model,
    16 MB a tree (this default at 64 problems a call) searched 1.2 times as long as keeping every node, nothing kept
    1.75 times, with the same answers (bench/search_cache.py, docs/results.md)."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.children", self.children), *count(f"{key}.step_tokens", self.step_tokens),
                *at_least_zero(f"{key}.c_uct", self.c_uct), *positive(f"{key}.temperature", self.temperature),
                *at_least_zero(f"{key}.cache_mb", self.cache_mb)]


@dataclass
class WinRateConfig:
    """Pairwise win rate on open-ended instructions after training (``win_rate.py``, AlpacaEval style): the
    policy's greedy answers against a reference model's, judged in both orders."""

    enabled: bool = False
    """Measure it after training (summary.json "win_rate", records in eval_after_win_rate.jsonl)."""
    prompts: str | None = None
    """JSONL file of {"prompt": ...} instructions; None: the 32 shipped ones (``win_rate.OPEN_PROMPTS``)."""
    reference: str = "base"
    """The model answered against: base (a frozen copy of the starting model), or a local model directory."""
    judge: str = "base"
    """The model that judges: base, policy, or a local model directory."""
    max_new_tokens: int = 64
    """Length of each answer."""

    def problems(self, key: str) -> list[str]:
        return [*filled(f"{key}.prompts", self.prompts), *filled(f"{key}.reference", self.reference),
                *filled(f"{key}.judge", self.judge), *count(f"{key}.max_new_tokens", self.max_new_tokens)]


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
    """The MCTS that labels partial responses while collecting."""
    base_model: str | None = None
    """Body of the value model; None uses the trained policy (the run's exported model)."""
    body: Literal["frozen", "lora", "full"] = "frozen"
    """frozen: a scalar head on the body's features, computed once (seconds on a CPU); lora: that head, then LoRA
    adapters on the body trained with it for ``body_epochs`` (the body runs forward and backward: tens of minutes on
    a CPU); full: the whole body fine-tuned so (the paper's setting, for GPUs). frozen is the default because on the
    embedded model's code targets a LoRA body ranked partial programs no better (docs/results.md, value-body study)."""
    depth: float = 0.6
    """Share of the body's decoder layers kept (the lowest); the head reads the residual stream there. On the
    embedded model's pyfunc value targets, cross-validated over training problems (bench/value_depth.py,
    docs/results.md), 0.6 of the depth picked and ranked answers and partial programs better than the last layer."""
    epochs: int = 30
    """Passes over the collected value targets that fit the head on the body's features as they are."""
    lr: float = 1e-3
    """Learning rate of the head."""
    body_epochs: int = 2
    """With a trained body (lora, full): passes that then train the body with the head (a linear probe first, then
    fine-tuning: a fresh head's first gradients would disturb the body)."""
    body_lr: float = 1e-4
    """Learning rate of a trained body's weights (LoRA adapters, or all of them)."""
    batch_size: int = 16
    """Value targets per gradient step."""
    decodings: list[str] = field(default_factory=lambda: ["best_of_n", "vm_mcts"])
    """Decoding strategies evaluated after the value model is trained (greedy is always evaluated)."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.tasks", self.tasks), *count(f"{key}.iterations", self.iterations),
                *self.search.problems(f"{key}.search"), *filled(f"{key}.base_model", self.base_model),
                *fraction(f"{key}.depth", self.depth, open_low=True),
                *count(f"{key}.epochs", self.epochs), *positive(f"{key}.lr", self.lr),
                *count(f"{key}.body_epochs", self.body_epochs, low=0), *positive(f"{key}.body_lr", self.body_lr),
                *count(f"{key}.batch_size", self.batch_size)]


@dataclass
class EvalConfig:
    seed: int = 987_654_321
    """Seed for the held-out set; the trainer's task streams never use it."""
    split: Literal["test", "validation"] = "test"
    """The held-out split evaluated: test (the one results report) or validation (drawn the same way from another
    seed, disjoint from test: choose settings on it, never on test). Training never draws the split evaluated,
    nor test when validation is."""
    per_level: int = 16
    """Held-out tasks per family and level."""
    levels: list[int] = field(default_factory=lambda: [1, 2, 3])
    """Held-out levels of each family."""
    families: list[str] | None = None
    """Held-out families; None: the curriculum's, held out by seed. A data set's named split is held out whole this
    way: curriculum.families=[hf:DIR:train] with eval.families=[hf:DIR:test]."""
    max_new_tokens: int = 24
    """Tokens per held-out answer at most (greedy decoding). Held-out episodes (generate.mode=episode) play under
    the training episodes' budget instead (control.max_new_tokens, episode.turn_tokens), so both meet the same task."""
    every: int = 20
    """Also evaluate every N steps (0: only before and after); each costs ~30 s on 2 cores."""
    batch_size: int = 64
    """Held-out prompts per generation call."""
    decoding: Literal["greedy", "best_of_n", "vm_mcts"] = "greedy"
    """greedy, best_of_n (samples until the token budget, the best picked by ``select_by``) or vm_mcts
    (tree search guided by the value model, the best finished answer by value)."""
    token_budget: int | None = None
    """Completion tokens per task for best_of_n and vm_mcts; None: 4 x max_new_tokens."""
    select_by: Literal["value", "process_value", "verifier"] = "value"
    """best_of_n: pick by the value model's score of the whole answer (an outcome reward model), by its weakest
    step's (process_value: the value model read as a PRM over the answer's lines), or by the task's verifier (an
    oracle upper bound: it reads the hidden tests)."""
    value_model: str | None = None
    """Directory of a trained value model (``autotelic value``, or run_dir/value_model)."""
    search: SearchConfig = field(default_factory=SearchConfig)
    win_rate: WinRateConfig = field(default_factory=WinRateConfig)
    pass_k: list[int] = field(default_factory=list)
    """After training, pass@k for each k listed (e.g. [1, 4]) from pass_samples sampled attempts per held-out task
    (answers, or whole episodes), strict; empty: not measured."""
    pass_samples: int = 8
    """Sampled attempts per held-out task for pass@k (at least the largest k)."""
    pass_temperature: float = 0.8
    """Sampling temperature of the pass@k attempts."""
    agent: Literal["policy", "operator"] = "policy"
    """Episode mode: held-out episodes by the policy alone (greedy), or by the operator agent (planner,
    grounder, reflector and summarizer roles, see ``operator``)."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.per_level", self.per_level), *filled(f"{key}.levels", self.levels),
                *filled(f"{key}.families", self.families),
                *[p for level in self.levels for p in count(f"{key}.levels entry", level)],
                *count(f"{key}.max_new_tokens", self.max_new_tokens),
                *rule(self.every >= 0, f"{key}.every", self.every, "be 0 (before and after training only) or more"),
                *count(f"{key}.batch_size", self.batch_size), *count(f"{key}.token_budget", self.token_budget),
                *filled(f"{key}.value_model", self.value_model), *self.search.problems(f"{key}.search"),
                *self.win_rate.problems(f"{key}.win_rate"), *count(f"{key}.pass_samples", self.pass_samples),
                *positive(f"{key}.pass_temperature", self.pass_temperature),
                *[problem for k in self.pass_k for problem in rule(
                    1 <= k <= self.pass_samples, f"{key}.pass_k entry", k,
                    f"lie in 1..{key}.pass_samples ({self.pass_samples})")]]
