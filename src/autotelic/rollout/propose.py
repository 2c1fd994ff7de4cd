"""Creator-executor self-play without labels: R-Zero (Huang et al. 2025) and Agent0 (Xia et al. 2025).

One policy plays both roles. A proposer prompt is a fixed instruction, optionally with one task of the
curriculum's families as a style example (its question only: no answer is shown or used). The policy
writes ``size`` proposals per prompt; each readable one (``parse_proposal``) becomes a question the same
policy answers ``answers`` times, as one plain reply or, given ``make_env``, in a multi-turn episode with a
tool (Agent0's tool-integrated executor). p is the share of the answers that agree with their majority
answer (``majority_answer``: unanswered samples count against it).

- Proposer reward (R-Zero's uncertainty reward, halved: min(p, 1 - p) peaks where the executor is split)
  minus ``repetition_penalty * |cluster| / B``: the step's B readable proposals are clustered by word
  3-gram Jaccard (single link at ``duplicate_threshold``; R-Zero clusters by BLEU), plus ``tool_bonus``
  times the share of the answers that called a tool (Agent0). An unreadable proposal, or a copy of its
  example, gets ``invalid_reward``.
- Executor: a proposed task with p in ``band`` gives a group of its answers, each paid 1 when it is the
  majority answer (the pseudo-label, as in TTRL), else 0; the group's mean reward is p. Tasks outside the
  band are dropped as ``out_of_band``. No reference answer exists, and none is ever used.

A proposal whose executor prompt is a held-out task (``HeldOut.excludes``: the proposer wrote an evaluation
question, up to case and spacing) is invalid, error ``heldout``: nobody trains on answering it.

Rewards go in ``Sample.info["return"]``, paid by the ``env`` reward. ``info["proposal"]`` of a proposer
sample records its question, p, pseudo-label, cluster size and tool share (written to rollouts.jsonl).

Code tasks (``kind="code"``, Absolute Zero) are proposed as a function and an input, labelled by running them
in the sandbox: ``propose_code.py``.

Alternation (R-Zero, Agent0): with ``phase_steps`` k > 0 the proposer trains for k steps, then the executor
for k steps, and so on. The role at rest still generates (p needs the answers, answers need proposals); its
groups are marked with the round's phase and dropped as ``phase`` by ``RestingRole``, as the band's misses are
by ``OutOfBand`` (the mode's filters: the generator only generates and pays). k = 0 trains both every step: with one shared policy each reward is
computed against the current executor either way and no generated group goes unused, so this is the cheaper
reading; k > 0 keeps the executor still while the proposer learns about it, as with the papers' two models.
The phase clock counts ``generate`` calls, one per step (``train.check_combination`` refuses dynamic
sampling, early exit and token budgets, which would call it more often or cut groups).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from autotelic.backends import PolicyBackend
from autotelic.config import ProposeKind
from autotelic.envs import Environment
from autotelic.guardrails import CREATOR_VALIDITY
from autotelic.heldout import HeldOut
from autotelic.rewards.majority import default_extract, majority_answer, ngram_jaccard
from autotelic.rollout.generate import EpisodeSampler, PolicySampler, RolloutWorker
from autotelic.rollout.propose_code import CODE_INSTRUCTION, CODE_LIMITS, answer_matches, label_programs, parse_program
from autotelic.sandbox import Sandbox
from autotelic.tasks.numbers import FORMAT
from autotelic.types import Group, Sample, Task

PROPOSER, EXECUTOR = "proposer", "executor"  # the task families of the two roles' groups
INSTRUCTION = ("Write one new, self-contained arithmetic question with a single numeric answer. "
               "End it with a question mark. Do not answer it. Reply with only the question.")
_LABEL = re.compile(r"^\W*(?:new\s+)?question\s*\d*\s*[:.)-]\s*", re.IGNORECASE)
Phase = Literal["both", "proposer", "executor"]


def parse_proposal(text: str, example: str = "", duplicate_threshold: float = 1.0) -> str | None:
    """The question of a proposal: the first line-local stretch of text ending in "?" that has three words
    and a number (a leading "Question:" label dropped). None when there is none, or when that question
    copies ``example`` (Jaccard at ``duplicate_threshold``): a copied example proposes nothing new."""
    for piece in text.split("?")[:-1]:
        question = _LABEL.sub("", piece.rsplit("\n", 1)[-1]).strip(" \t\"'*`") + "?"
        if len(question.split()) >= 3 and any(c.isdigit() for c in question):
            copied = example and ngram_jaccard(question, example.partition("?")[0] + "?") >= duplicate_threshold
            return None if copied else question
    return None


def cluster_sizes(texts: list[str], threshold: float) -> list[int]:
    """For each text, the size of its cluster: texts linked by Jaccard >= ``threshold``, transitively."""
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if ngram_jaccard(texts[i], texts[j]) >= threshold:
                parent[root(i)] = root(j)
    roots = [root(i) for i in range(len(texts))]
    return [roots.count(r) for r in roots]


def vote(answers: list[str | None]) -> tuple[str | None, float, list[float]]:
    """(pseudo-label, p, rewards): the majority answer, its share of all answers, 1 for each answer equal to it."""
    label, p = majority_answer(answers)
    return label, p, [float(label is not None and answer == label) for answer in answers]


def phase(round_index: int, phase_steps: int) -> Phase:
    """Which role trains in round ``round_index`` (from 0): the proposer's phase comes first."""
    if phase_steps <= 0:
        return "both"
    return PROPOSER if (round_index // phase_steps) % 2 == 0 else EXECUTOR


def in_band(p: float, band: tuple[float, float]) -> bool:
    return band[0] <= p <= band[1]


def uncertainty(p: float) -> float:
    """R-Zero's edge, halved: highest where the executor's answers split evenly."""
    return min(p, 1.0 - p)


def learnability(p: float) -> float:
    """Absolute Zero's proposer reward for a solve rate p: 1 - p, but 0 for a task always or never solved."""
    return 0.0 if p in (0.0, 1.0) else 1.0 - p


@dataclass(frozen=True)
class ProposerReward:
    repetition_penalty: float = 1.0
    duplicate_threshold: float = 0.5
    tool_bonus: float = 0.1
    invalid_reward: float = -1.0
    edge: Callable[[float], float] = uncertainty
    """The reward for the executor's p: ``uncertainty`` (R-Zero) or ``learnability`` (AZR, code tasks)."""

    def __call__(self, p: float, cluster: int, batch: int, tool_share: float) -> float:
        return self.edge(p) - self.repetition_penalty * cluster / batch + self.tool_bonus * tool_share


def final_answer(sample: Sample) -> str:
    """What an executor answered: its reply, or in a tool episode its last turn if that was no tool call."""
    if "turns" in sample.info:
        return sample.info.get("env", {}).get("answer", "")
    return sample.text


def used_tool(sample: Sample) -> bool:
    return sample.info.get("env", {}).get("tool_calls", 0) > 0


class Proposal(NamedTuple):
    sample: Sample
    question: str | None
    """The executor's prompt (before ``FORMAT`` for arithmetic); None: an invalid proposal."""
    label: str | None
    """The executed output of a code task; None: voted on later (arithmetic)."""
    key: str
    """What near-duplicates are judged on: the question, or a code task's program (not the shared template)."""


@dataclass
class ProposeSampler:
    """Proposer groups (one per task, ``size`` proposals each), then an executor group per readable proposal."""

    policy: PolicyBackend
    heldout: HeldOut
    """Questions the executor must never train on: a proposal that writes one is invalid."""
    answers: int = 8
    band: tuple[float, float] = (0.3, 0.8)
    reward: ProposerReward = field(default_factory=ProposerReward)
    phase_steps: int = 0
    show_example: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    make_env: Callable[[], Environment] | None = None
    """The executor's tool environment (episodes of at most ``max_turns``); None: one plain reply."""
    max_turns: int = 4
    kind: ProposeKind = "arithmetic"
    """What the proposer writes: arithmetic questions (answers voted on) or code tasks (labels executed)."""
    sandbox: Sandbox | None = None
    """Runs code proposals (kind="code"); None: one with ``CODE_LIMITS``, made on first use."""
    rounds: int = 0
    """``generate`` calls so far: the phase clock."""

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        training = phase(self.rounds, self.phase_steps)
        self.rounds += 1
        sampler = PolicySampler(self.policy, self.temperature, self.top_p)
        proposer_groups = sampler.generate([self.proposer_task(t) for t in tasks], sizes, max_new_tokens)
        samples = [(s, g.task.meta["example"]) for g in proposer_groups for s in g.samples]
        proposals = self._programs([s for s, _ in samples]) if self.kind == "code" else self._questions(samples)
        proposals = [self._unless_heldout(proposal) for proposal in proposals]
        valid = [proposal for proposal in proposals if proposal.question is not None]
        executor_groups = self._answer([proposal.question or "" for proposal in valid], max_new_tokens)
        clusters = cluster_sizes([proposal.key for proposal in valid], self.reward.duplicate_threshold)
        for proposal, group, cluster in zip(valid, executor_groups, clusters):
            self._settle(proposal, group, cluster, len(valid))
        for proposal in proposals:
            if proposal.question is None:
                proposal.sample.info["return"] = self.reward.invalid_reward
                proposal.sample.info.setdefault("proposal", {"question": None})
        for group in proposer_groups + executor_groups:
            group.task.meta["phase"] = training  # which role trains this round: RestingRole drops the other
        return proposer_groups + executor_groups

    def proposer_task(self, seed: Task) -> Task:
        """The proposer's prompt for a curriculum task: the instruction, and the task's question as a style example
        (code tasks: the instruction's own format example instead)."""
        if self.kind == "code":
            return Task(CODE_INSTRUCTION, "", PROPOSER, seed.level, f"{PROPOSER}:{seed.uid}", meta={"example": ""})
        example = seed.prompt.replace(FORMAT, "").strip() if self.show_example else ""
        prompt = f"{INSTRUCTION}\nExample question: {example}" if example else INSTRUCTION
        return Task(prompt, "", PROPOSER, seed.level, f"{PROPOSER}:{seed.uid}", meta={"example": example})

    def _questions(self, samples: list[tuple[Sample, str]]) -> list[Proposal]:
        """Arithmetic proposals with their questions (None: unreadable, or a copy of the sample's example)."""
        proposals = []
        for sample, example in samples:
            question = parse_proposal(sample.text, example, self.reward.duplicate_threshold)
            proposals.append(Proposal(sample, question, None, question or ""))
        return proposals

    def _programs(self, samples: list[Sample]) -> list[Proposal]:
        """Code proposals, labelled by running them; an invalid one's reason goes in its info."""
        programs = [parse_program(sample.text) for sample in samples]
        if self.sandbox is None:
            self.sandbox = Sandbox(CODE_LIMITS)
        labels = iter(label_programs(self.sandbox, [p for p in programs if p is not None]))
        proposals = []
        for sample, program in zip(samples, programs):
            label = None if program is None else next(labels)
            if program is None or label is None:
                sample.info["proposal"] = {"question": None, "error": "unparsed" if program is None else "execution"}
                proposals.append(Proposal(sample, None, None, ""))
            else:
                proposals.append(Proposal(sample, program.question(), label, program.script()))
        return proposals

    def _executor_task(self, question: str) -> Task:
        prompt = question if self.kind == "code" else f"{question} {FORMAT}"
        return Task(prompt, "", EXECUTOR, 0, f"{EXECUTOR}:{question}", meta={"created_by": "proposer"})

    def _unless_heldout(self, proposal: Proposal) -> Proposal:
        """The proposal, or an invalid one when its question is a held-out task."""
        if proposal.question is None or not self.heldout.excludes(self._executor_task(proposal.question)):
            return proposal
        proposal.sample.info["proposal"] = {"question": None, "error": "heldout"}
        return Proposal(proposal.sample, None, None, "")

    def _answer(self, questions: list[str], max_new_tokens: int) -> list[Group]:
        tasks = [self._executor_task(q) for q in questions]
        if self.make_env is None:
            sampler: RolloutWorker = PolicySampler(self.policy, self.temperature, self.top_p)
        else:
            sampler = EpisodeSampler(self.policy, self.make_env, self.temperature, self.top_p, self.max_turns)
        return sampler.generate(tasks, self.answers, max_new_tokens)

    def _judge(self, answers: list[str], label: str | None) -> tuple[str | None, float, list[float]]:
        """(label, p, rewards): code answers against their executed label, arithmetic ones by vote."""
        if self.kind != "code":
            return vote([default_extract(answer) for answer in answers])
        rewards = [float(answer_matches(answer, label or "")) for answer in answers]
        return label, sum(rewards) / len(rewards), rewards

    def _settle(self, proposal: Proposal, group: Group, cluster: int, batch: int) -> None:
        """Judge the executor's answers and pay both roles (the band and the phase filter them: ``filters``)."""
        label, p, rewards = self._judge([final_answer(s) for s in group.samples], proposal.label)
        tool_share = sum(used_tool(s) for s in group.samples) / len(group.samples)
        for sample, reward in zip(group.samples, rewards):
            sample.info["return"] = reward
        group.task = dataclasses.replace(group.task, answer=label or "", meta={"p": p})
        banded = in_band(p, self.band)
        proposal.sample.info.update({
            "return": self.reward(p, cluster, batch, tool_share),
            "proposal": {"question": proposal.question, "p": p, "label": label, "cluster": cluster,
                         "tool_share": tool_share, "in_band": banded},
        })

    def state_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds = state["rounds"]


@dataclass(frozen=True)
class OutOfBand:
    """An executor group whose answers agree (p) outside the band teaches the executor little."""

    band: tuple[float, float]
    name: str = "out_of_band"

    def keep(self, group: Group) -> bool:
        return group.task.family != EXECUTOR or in_band(group.task.meta["p"], self.band)


@dataclass(frozen=True)
class RestingRole:
    """With alternating phases, the role that does not train this round is generated (the other role needs it)
    but not trained on."""

    name: str = "phase"

    def keep(self, group: Group) -> bool:
        return group.task.meta.get("phase", "both") in ("both", group.task.family)


def filters(band: tuple[float, float]) -> list[OutOfBand | RestingRole]:
    """The propose mode's group filters, ahead of the run's: out of band first, then the role at rest."""
    return [OutOfBand(band), RestingRole()]


def proposal_metrics(groups: list[Group]) -> dict[str, float]:
    """propose/*: how proposals fared this step; empty when no group is a proposer's."""
    proposals = [s.info["proposal"] for g in groups if g.task.family == PROPOSER for s in g.samples]
    if not proposals:
        return {}
    valid = [p for p in proposals if p["question"] is not None]
    proposer_returns = [s.info["return"] for g in groups if g.task.family == PROPOSER for s in g.samples]
    banded = [s.info["return"] for g in groups if g.task.family == EXECUTOR and g.dropped_by != "out_of_band"
              for s in g.samples]
    share = len(valid) or 1  # shares of nothing are 0
    return {
        CREATOR_VALIDITY: len(valid) / len(proposals),
        "propose/mean_p": sum(p["p"] for p in valid) / share,
        "propose/in_band_share": sum(p["in_band"] for p in valid) / share,
        "propose/duplicate_rate": sum(p["cluster"] > 1 for p in valid) / share,
        "propose/tool_share": sum(p["tool_share"] for p in valid) / share,
        "propose/proposer_reward": sum(proposer_returns) / len(proposer_returns),
        "propose/executor_reward": sum(banded) / len(banded) if banded else 0.0,
    }
