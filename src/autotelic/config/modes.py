"""The sections of the generation modes: each mode's own settings under its name (``tree``, ``partial``,
``episode``, ``selfplay``, ``propose``, ``discussion``) and the web operator agent's (``operator``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from autotelic.config.rules import at_least_zero, band, count, filled, finite, fraction, rule


ProposeKind = Literal["arithmetic", "code"]


@dataclass
class TreeConfig:
    """generate.mode=tree (TreeRL): each group is generate.group_size samples plus the continuations drawn
    where some of them branch."""

    branches: int = 2
    """Samples of each group that are branched (at their highest-entropy token)."""
    branch_samples: int = 2
    """New continuations drawn from each branch point."""
    depth: int = 1
    """Levels of branch points: with 2 or more, the first ``branches`` new continuations of each group branch
    again inside their own tokens, and so on (each level adds up to branches x branch_samples samples a group)."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.branches", self.branches), *count(f"{key}.branch_samples", self.branch_samples),
                *count(f"{key}.depth", self.depth)]


@dataclass
class PartialConfig:
    """generate.mode=partial: long samples pause at a per-step token budget and continue next step."""

    segment_tokens: int = 16
    """Tokens generated per sample per step before it pauses."""

    def problems(self, key: str) -> list[str]:
        return count(f"{key}.segment_tokens", self.segment_tokens)


@dataclass
class EpisodeConfig:
    """Multi-turn episodes against generate.env: generate.mode=episode, selfplay's games and propose's executor
    tools. All turns of an episode together take at most control.max_new_tokens."""

    max_turns: int = 4
    """Policy turns per episode at most; selfplay: moves per game, both players' together."""
    turn_tokens: int | None = None
    """Tokens per policy turn at most (e.g. one web action); None: the episode's remaining budget."""
    max_invalid: int | None = None
    """Early exit: an episode ends after this many invalid actions in a row (None: never)."""
    tree_roots: int = 0
    """generate.mode=episode, tree rollouts branching at turn boundaries: each group starts this many episodes and
    copies them after each of ``branch_turns`` until it holds generate.group_size (siblings share their turns up
    to the branch point; environments must replay deterministically). 0: every episode starts on its own."""
    branch_turns: list[int] = field(default_factory=lambda: [1])
    """tree_roots > 0: the turn counts after which a group's episodes are copied, each below max_turns."""

    def problems(self, key: str) -> list[str]:
        turns = self.branch_turns
        return [*count(f"{key}.max_turns", self.max_turns), *count(f"{key}.turn_tokens", self.turn_tokens),
                *count(f"{key}.max_invalid", self.max_invalid), *at_least_zero(f"{key}.tree_roots", self.tree_roots),
                *rule(not self.tree_roots or bool(turns) and turns == sorted(set(turns)) and 1 <= turns[0]
                      and turns[-1] < self.max_turns, f"{key}.branch_turns", turns,
                      f"be increasing turn counts from 1 to {key}.max_turns - 1 = {self.max_turns - 1}")]


@dataclass
class SelfplayConfig:
    """generate.mode=selfplay (SPIRAL): the policy plays the two-player game generate.env."""

    opponent: Literal["self", "frozen"] = "self"
    """The policy plays itself, or a frozen copy of the initial policy (SPIRAL's fixed-opponent ablation; the
    policy then takes each seat in every other game and trains on its seats only)."""

    def problems(self, key: str) -> list[str]:
        return []


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
    """The executor answers in multi-turn episodes with this tool (episode.max_turns); None: one plain reply."""

    def problems(self, key: str) -> list[str]:
        return [*rule(self.answers_per_task >= 2, f"{key}.answers_per_task", self.answers_per_task,
                       "be at least 2 (a vote)"),
                *band(f"{key}.band", self.band), *at_least_zero(f"{key}.repetition_penalty", self.repetition_penalty),
                *fraction(f"{key}.duplicate_threshold", self.duplicate_threshold, open_low=True),
                *finite(f"{key}.tool_bonus", self.tool_bonus), *finite(f"{key}.invalid_reward", self.invalid_reward),
                *rule(self.phase_steps >= 0, f"{key}.phase_steps", self.phase_steps,
                       "be 0 (both roles every step) or more")]


@dataclass
class DiscussionConfig:
    """generate.mode=discussion (CoMAS): ``agents`` policies discuss each task for ``rounds`` rounds; in each, a
    discussion holds ``solutions`` exchanges: a solver answers, an evaluator lists its errors and a scorer grades
    it, three different agents. Rewards: solver the normalised grade s, evaluator 1 - s, scorer 0 for a readable
    (tagged) grade, ``unparsed_penalty`` otherwise."""

    agents: int = 3
    """Policies, each a model of its own (model.lora: LoRA or full fine-tuning) trained on its own turns; at least
    3, so that no agent grades or critiques its own work; 1: one agent plays every role (the single-agent
    ablation)."""
    models: list[str | None] | None = None
    """Each agent's model, one per agent: a local model directory, random:<shape>, or null for model.path; agents
    on different models (tokenizers too) co-train in one run. None: every agent starts from model.path."""
    rounds: int = 2
    """Rounds per discussion; a later round's solvers see answers and critiques of the round before."""
    solutions: int = 3
    """Exchanges (answer, critique, grade) per round of a discussion; CoMAS has one per agent."""
    references: int = 2
    """Earlier exchanges (answer and critique) a solver after the first round is shown."""
    grade_low: int = 1
    """The lowest grade (wrong); see grade_high."""
    grade_high: int = 3
    """The scorer grades from grade_low (wrong) to grade_high (correct)."""
    unparsed_penalty: float = -1.0
    """The scorer's reward when its grade cannot be read (a readable grade earns 0, or see consensus)."""
    consensus: bool = False
    """Not the paper's: a readable grade earns the scorer 1 - |s - y|, y = 1 when the graded answer is the vote of
    the round's answers to its task (the agents' own majority, no answer key), else 0; false: 0 (CoMAS)."""
    grade_tokens: int = 32
    """New tokens a scorer's turn may take at most: a brief reason, then the grade as <score>N</score>, the only
    part read (other turns: control.max_new_tokens)."""
    roles: list[str] | None = None
    """Each agent's fixed seat, one per agent, from solver, evaluator, scorer (every role held at least once; a
    role held by several agents rotates among them), e.g. [solver, evaluator, scorer]; None: the seats rotate
    over tasks, rounds, discussions and exchanges, so every agent plays every role."""
    lrs: list[float | None] | None = None
    """Each agent's learning rate, one per agent, null for algorithm.lr; 0 freezes the agent (it plays and is
    rewarded, never updated: e.g. a steadier judge). None: algorithm.lr for every agent."""

    def problems(self, key: str) -> list[str]:
        return [*count(f"{key}.agents", self.agents), *count(f"{key}.rounds", self.rounds),
                *count(f"{key}.solutions", self.solutions), *count(f"{key}.references", self.references, 0),
                *rule(self.models is None or len(self.models) == self.agents, f"{key}.models", self.models,
                      f"list one model per agent ({key}.agents={self.agents}), null for model.path"),
                *rule(self.agents != 2, f"{key}.agents", self.agents,
                      "not be 2: of two agents one would grade or critique its own work; use 3 or more, or 1 for "
                      "the single-agent ablation"),
                *count(f"{key}.grade_tokens", self.grade_tokens),
                *self._seat_problems(key),
                *rule(self.lrs is None or len(self.lrs) == self.agents, f"{key}.lrs", self.lrs,
                      f"list one learning rate per agent ({key}.agents={self.agents}), null for algorithm.lr"),
                *rule(all(lr is None or math.isfinite(lr) and lr >= 0 for lr in self.lrs or []), f"{key}.lrs",
                      self.lrs, "hold learning rates of 0 or more (0 freezes an agent) or null"),
                *rule(self.grade_low < self.grade_high, f"{key}.grade_low", self.grade_low,
                       f"be below {key}.grade_high ({self.grade_high})"),
                *rule(self.unparsed_penalty <= 0, f"{key}.unparsed_penalty", self.unparsed_penalty,
                       "be at most 0 (a penalty)")]

    def _seat_problems(self, key: str) -> list[str]:
        if self.roles is None:
            return []
        seats = ("solver", "evaluator", "scorer")
        return [*rule(len(self.roles) == self.agents, f"{key}.roles", self.roles,
                      f"list one role per agent ({key}.agents={self.agents})"),
                *rule(set(self.roles) <= set(seats), f"{key}.roles", self.roles, f"name roles from {list(seats)}"),
                *rule(set(seats) <= set(self.roles), f"{key}.roles", self.roles,
                      "give every role (solver, evaluator, scorer) to at least one agent")]


@dataclass
class OperatorConfig:
    """OpAgent's operator agent for web episodes (``eval.agent=operator``): a backend per role; every step runs
    reflector -> planner -> grounder, and the summarizer sums the episode up at its end."""

    planner: str = "policy"
    """Who plays the role (the plan for what remains, rewritten every step): policy (the model being trained or
    evaluated), base (the initial model) or the directory of any local model; likewise for the other roles."""
    grounder: str = "policy"
    """Writes the next action from the plan, the last steps and the page."""
    reflector: str = "policy"
    """Judges the last step (every step after the first) in one sentence, for the planner."""
    summarizer: str = "policy"
    """Sums the episode up in one sentence once it ends (``info["roles"]["summary"]``)."""
    plan_tokens: int = 64
    """Tokens of the planner's reply at most."""
    action_tokens: int = 32
    """Tokens of the grounder's action at most."""
    note_tokens: int = 32
    """Reflector and summarizer replies."""
    keep_recent: int = 2
    """The last steps (action and outcome) the grounder sees; the planner sees them all."""

    def problems(self, key: str) -> list[str]:
        return [*[p for role in ("planner", "grounder", "reflector", "summarizer")
                  for p in filled(f"{key}.{role}", getattr(self, role))],
                *count(f"{key}.plan_tokens", self.plan_tokens), *count(f"{key}.action_tokens", self.action_tokens),
                *count(f"{key}.note_tokens", self.note_tokens), *count(f"{key}.keep_recent", self.keep_recent, 0)]
