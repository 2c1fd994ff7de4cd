"""CoMAS (Xue et al. 2025, "CoMAS: Co-Evolving Multi-Agent Systems via Interaction Rewards"): agents
improve by discussing problems, each rewarded by the others' judgments, never by the answer key.

Each task gets ``size`` independent discussions of ``rounds`` rounds. In every round a discussion holds
``solutions`` exchanges (CoMAS: one per agent): a solver answers (from round 1 on its prompt shows
``references`` of the previous round's answers with their critiques), an evaluator lists the errors of
that answer, and a scorer, shown both, grades the answer from ``low`` to ``high``. The three seats of an
exchange are consecutive agents from an offset that moves on with the task, the round, the discussion and
the exchange (``seats``), so every agent plays every role, and with three or more agents no agent ever
grades its own answer or critique, nor critiques its own answer (two agents cannot manage that, and are
refused by the mode's checks); one agent plays every role (the single-agent ablation, the same turns).
``roles`` instead gives each agent one seat for the whole run, so it can specialise (a judge that only
judges); an agent whose learning rate is 0 (``discussion.lrs``) keeps its weights, a steadier judge.

Rewards (``round_rewards``), in ``info["return"]`` for the ``env`` reward, zero-sum between solver and
evaluator and paid by a third agent's grade:
- solver: the grade normalised to [0, 1], s = (g - low) / (high - low);
- evaluator: 1 - s, so a critique that sinks a bad answer pays and one that sinks a good answer costs;
- scorer: 0 for a readable grade, ``unparsed_penalty`` otherwise; a readable grade is the one part of its job
  the others cannot judge, so that alone is rewarded (CoMAS). As in the official code the scorer explains
  briefly, then writes the grade as ``<score>N</score>``, and only a tag within the scale is read
  (``rewards.judge.parse_tagged_score``): read from the reply's first number, "1. The answer is wrong" was a
  grade, and paid for any readable grade every scorer learnt to open with "1.", which made every solver reward
  constant and spread into the solvers' answers (docs/results.md).
  With ``consensus`` (this project's option, not the paper's), a readable grade instead earns 1 - |s - y|,
  y = 1 when the graded answer is the vote of the round's answers to the task over all its discussions, else 0:
  paid by format alone, a small model's scorers settle on one grade and the grades stop carrying information
  (docs/results.md), where agreement with the agents' own vote, as TTRL's label, still needs no answer key.
An exchange whose grade does not parse says nothing about its answer or critique: those two turns get nan
and go to a group of their own, which the Filter drops as unscorable (logged, never trained).

Groups: one per task, round, role and agent, holding that agent's turns in that role over the task's
discussions and exchanges, which are its group-relative baseline (REINFORCE++-baseline then whitens over
the batch). The turns' prompts differ past what they share: a group's ``prompt_ids`` are the shared part,
the rest of each sample's prompt starts it, masked. ``task.answer`` is read only by ``evaluate_discussion``
and ``discussion_metrics``, to report accuracy.

Choices of this implementation where the paper leaves room or the CPU budget decides: seats by rotation
rather than shuffled (the official code's shuffle lets an agent grade itself), the references of a round
chosen by rotation from the exchange's index, a 1-3 scale (as the official code), a scorer turn capped at
``grade_tokens`` (its own budget, not ``max_new_tokens``), and unreadable grades leaving their exchange unrewarded
rather than scored at a default.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from autotelic.backends import PolicyBackend
from autotelic.rewards.judge import parse_tagged_score
from autotelic.rewards.majority import MajorityVoteReward, default_extract, majority_answer
from autotelic.rollout.filter import verifier_reward
from autotelic.rollout.generate import PolicySampler, common_prefix, sizes_per_task, under_shared_prompt
from autotelic.types import Group, Sample, Task

ROLES = ("solver", "evaluator", "scorer")
SOLVER, EVALUATOR, SCORER = range(len(ROLES))
LOGGED_INFO = ("agent", "role", "round", "solution", "discussion", "grade")  # sample facts rollouts.jsonl records


def seats(task_index: int, round_index: int, discussion_index: int, solution: int, agents: int,
          roles: tuple[str, ...] | None = None) -> tuple[int, ...]:
    """The agents playing solver, evaluator and scorer of an exchange: consecutive agents from an offset that
    moves on by one per task, round, discussion and exchange, so the roles rotate; with three or more agents
    the three are different agents. ``roles`` (one per agent) fixes each agent's seat instead: a role held by
    several agents rotates among them by the same offset."""
    first = task_index + round_index + discussion_index + solution
    if roles is None:
        return tuple((first + role) % agents for role in range(len(ROLES)))
    holders = [[agent for agent, held in enumerate(roles) if held == name] for name in ROLES]
    return tuple(mine[first % len(mine)] for mine in holders)


# ---- what each role is asked ------------------------------------------------------------------
# What differs between a task's discussions comes last in each message: the longer the prefix they share,
# the less of each prompt the update has to run per sample (see ``role_groups``).
def solver_message(problem: str, references: list[tuple[str, str]]) -> str:
    """Round 0: the problem as it is, so a first answer is the agent's plain answer. Later rounds: the
    problem, then earlier (answer, critique) pairs to learn from (grades are not shown, as in CoMAS)."""
    if not references:
        return problem
    lines = [problem, "", "Earlier answers to this problem and their reviews:"]
    for number, (answer, critique) in enumerate(references, 1):
        lines += [f"{number}. Answer: {answer}", f"   Review: {critique}"]
    return "\n".join([*lines, "", "Using the reviews, give your answer."])


def evaluator_message(problem: str, answer: str) -> str:
    return ("List the errors in the proposed answer to this problem, briefly. If it is correct, say so.\n\n"
            f"Problem: {problem}\n\nProposed answer: {answer}")


def scorer_message(problem: str, answer: str, critique: str, low: int, high: int) -> str:
    """As CoMAS's official prompt: a brief reason first, then the grade in a tag, the only part read."""
    return (f"Grade the proposed answer to this problem from {low} (wrong) to {high} (correct), using the review. "
            f"Explain briefly, then write the grade inside <score></score> tags, for example: The sum is wrong. "
            f"<score>{low}</score>\n\nProblem: {problem}\n\nProposed answer: {answer}\n\nReview: {critique}\n\n"
            f"Explain briefly, then end with <score>N</score>, N from {low} to {high}.")


@dataclass(frozen=True)
class RoundRewards:
    grade: float | None  # the scorer's grade on its scale; None when it does not parse
    returns: tuple[float, float, float]  # solver, evaluator, scorer (nan: no reward)


def round_rewards(grade_reply: str, low: int, high: int, unparsed_penalty: float,
                  agrees: bool | None = None) -> RoundRewards:
    """Each role's reward from the scorer's reply (see the module docstring); ``agrees``: whether the graded answer
    is the vote's (``consensus``), None to pay a readable grade alone."""
    grade = parse_tagged_score(grade_reply, low, high)
    if grade is None:
        return RoundRewards(None, (math.nan, math.nan, unparsed_penalty))
    score = (grade - low) / (high - low)
    scorer = 0.0 if agrees is None else 1.0 - abs(score - float(agrees))
    return RoundRewards(float(grade), (score, 1.0 - score, scorer))


# ---- discussions --------------------------------------------------------------------------------
@dataclass
class Turn:
    agent: int
    message: str  # the user message the agent answered
    prompt_ids: list[int]
    sample: Sample  # its reply


@dataclass
class Discussion:
    task: Task
    task_index: int  # position of the task in its batch (seats rotate with it)
    index: int  # which of the task's discussions
    rounds: list[list[list[Turn]]] = field(default_factory=list)  # per round and exchange, its turns in role order

    @property
    def uid(self) -> str:
        return f"{self.task.uid}#{self.index}"

    def references(self, solution: int, count: int) -> list[tuple[str, str]]:
        """(answer, critique) of ``count`` exchanges of the previous round, from the one of the same index on."""
        if len(self.rounds) < 2:
            return []
        previous = [turns for turns in self.rounds[-2] if len(turns) == len(ROLES)]
        picked = [previous[(solution + k) % len(previous)] for k in range(min(count, len(previous)))]
        return [(turns[SOLVER].sample.text, turns[EVALUATOR].sample.text) for turns in picked]

    def message(self, role: int, solution: int, references: int, low: int, high: int) -> str:
        """What ``role`` of exchange ``solution`` is asked next, from the discussion so far."""
        problem = self.task.prompt
        if role == SOLVER:
            return solver_message(problem, self.references(solution, references))
        current = [turn.sample.text for turn in self.rounds[-1][solution]]
        if role == EVALUATOR:
            return evaluator_message(problem, current[SOLVER])
        return scorer_message(problem, current[SOLVER], current[EVALUATOR], low, high)


def votes_agreed(discussions: list[Discussion], round_index: int) -> list[list[bool]]:
    """Per discussion and exchange of round ``round_index``: whether TTRL's majority vote (``MajorityVoteReward``)
    over the round's answers to its task, in all the task's discussions, pays its answer (``consensus``)."""
    vote = MajorityVoteReward()
    agreed: list[list[bool]] = [[] for _ in discussions]
    for task_index in {d.task_index for d in discussions}:
        mine = [i for i, d in enumerate(discussions) if d.task_index == task_index]
        answers = [[turns[SOLVER].sample.text for turns in discussions[i].rounds[round_index]] for i in mine]
        paid = iter(vote(discussions[mine[0]].task, [answer for texts in answers for answer in texts]))
        for i, texts in zip(mine, answers):
            agreed[i] = [next(paid) == 1.0 for _ in texts]
    return agreed


def reward_round(discussion: Discussion, round_index: int, low: int, high: int, unparsed_penalty: float,
                 agreed: list[bool] | None = None) -> None:
    """Label a finished round's samples, exchange by exchange: rewards (``info["return"]``), grade, roles, agents;
    ``agreed``: per exchange whether its answer is the vote's (``consensus``), None to pay format alone."""
    for solution, turns in enumerate(discussion.rounds[round_index]):
        rewards = round_rewards(turns[SCORER].sample.text, low, high, unparsed_penalty,
                                None if agreed is None else agreed[solution])
        for role, (turn, reward) in enumerate(zip(turns, rewards.returns)):
            turn.sample.info.update({"return": reward, "grade": rewards.grade, "agent": turn.agent,
                                     "role": ROLES[role], "round": round_index, "solution": solution,
                                     "discussion": discussion.uid})


def role_groups(discussions: list[Discussion], round_index: int, role: int) -> list[Group]:
    """One task's turns in ``role`` in round ``round_index``, as a group per agent: its rewarded turns, and
    apart from them those without a reward (nan, their grade unreadable), which the Filter drops."""
    task = discussions[0].task
    turns = [exchange[role] for d in discussions for exchange in d.rounds[round_index]]
    groups = []
    for agent in sorted({turn.agent for turn in turns}):
        for rewarded in (True, False):
            chosen = [t for t in turns if t.agent == agent and math.isfinite(t.sample.info["return"]) == rewarded]
            if not chosen:
                continue
            shared = common_prefix([t.prompt_ids for t in chosen])
            for turn in chosen:
                under_shared_prompt(turn.sample, turn.prompt_ids, shared)
            role_task = dataclasses.replace(
                task, prompt=chosen[0].message, uid=f"{task.uid}/r{round_index}/{ROLES[role]}/a{agent}",
                meta={**task.meta, "agent": agent, "role": ROLES[role], "round": round_index})
            groups.append(Group(role_task, shared, [t.sample for t in chosen]))
    return groups


@dataclass
class DiscussionSampler:
    """``size`` discussions per task among ``agents``; a group per task, round, role and agent (module docstring)."""

    agents: list[PolicyBackend]
    rounds: int = 2
    solutions: int = 1  # exchanges per round of a discussion
    references: int = 2  # earlier exchanges a later round's solver is shown
    low: int = 1
    high: int = 3
    unparsed_penalty: float = -1.0
    consensus: bool = False  # the scorer paid for agreeing with the vote of the round's answers (module docstring)
    grade_tokens: int = 32  # a scorer's turn: a brief reason, then the tagged grade
    roles: tuple[str, ...] | None = None  # each agent's fixed seat; None: the seats rotate (``seats``)
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        discussions = self.discuss(tasks, sizes, max_new_tokens)
        by_task: dict[int, list[Discussion]] = defaultdict(list)
        for discussion in discussions:
            by_task[discussion.task_index].append(discussion)
        return [group for mine in by_task.values() for r in range(self.rounds) for role in range(len(ROLES))
                for group in role_groups(mine, r, role)]

    def discuss(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Discussion]:
        """Every discussion, played round by round; each turn of a role is one batched call per agent."""
        discussions = [Discussion(task, t, d) for t, (task, size) in enumerate(zip(tasks, sizes_per_task(sizes,
                       len(tasks)))) for d in range(size)]
        for r in range(self.rounds):
            for discussion in discussions:
                discussion.rounds.append([[] for _ in range(self.solutions)])
            for role in range(len(ROLES)):
                self._turn(discussions, role, max_new_tokens)
            agreed = votes_agreed(discussions, r) if self.consensus else [None] * len(discussions)
            for discussion, exchanges_agreed in zip(discussions, agreed):
                reward_round(discussion, r, self.low, self.high, self.unparsed_penalty, exchanges_agreed)
        return discussions

    def _turn(self, discussions: list[Discussion], role: int, max_new_tokens: int) -> None:
        by_agent: dict[int, list[tuple[Discussion, int, str]]] = defaultdict(list)
        for discussion in discussions:
            for solution in range(self.solutions):
                agent = seats(discussion.task_index, len(discussion.rounds) - 1, discussion.index, solution,
                              len(self.agents), self.roles)[role]
                message = discussion.message(role, solution, self.references, self.low, self.high)
                by_agent[agent].append((discussion, solution, message))
        budget = self.grade_tokens if role == SCORER else max_new_tokens
        for agent, asked in by_agent.items():
            sampler = PolicySampler(self.agents[agent], self.temperature, self.top_p, self.greedy)
            turn_tasks = [dataclasses.replace(d.task, prompt=message, response_prefix="") for d, _, message in asked]
            for (discussion, solution, message), group in zip(asked, sampler.generate(turn_tasks, 1, budget)):
                discussion.rounds[-1][solution].append(Turn(agent, message, group.prompt_ids, group.samples[0]))


# ---- reporting (the answer key is read here only) ------------------------------------------------
def voted(answers: list[str]) -> str:
    """The earliest answer whose extracted answer won the vote, as written (so that no format is forgiven that
    the others are held to); the last one when none has an answer."""
    extracted = [default_extract(a) for a in answers]
    vote, _ = majority_answer(extracted)
    return answers[extracted.index(vote)] if vote is not None else answers[-1]


def discussion_record(discussion: Discussion) -> dict[str, Any]:
    """A discussion's answers scored by the task's verifier: its answer, the vote of its last round's solutions
    (``final``); the vote of the first round's (the agents' plain answers); the vote over every round; and the
    share of the last round's solutions that are right (CoMAS's final accuracy)."""
    task = discussion.task
    answers = [[exchange[SOLVER].sample.text for exchange in exchanges] for exchanges in discussion.rounds]
    return {"family": task.family, "level": task.level, "prompt": task.prompt, "answer": task.answer,
            "final": verifier_reward(task, voted(answers[-1])), "first_round": verifier_reward(task, voted(answers[0])),
            "majority": verifier_reward(task, voted([a for round_answers in answers for a in round_answers])),
            "final_share": sum(verifier_reward(task, a) >= 1.0 for a in answers[-1]) / len(answers[-1]),
            "turns": [{"agent": t.agent, "role": ROLES[role], "round": r, "solution": j, "text": t.sample.text}
                      for r, exchanges in enumerate(discussion.rounds) for j, exchange in enumerate(exchanges)
                      for role, t in enumerate(exchange)],
            "grades": [exchange[SCORER].sample.info["grade"] for exchanges in discussion.rounds
                       for exchange in exchanges]}


def evaluate_discussion(sampler: DiscussionSampler, tasks: list[Task], max_new_tokens: int, batch_size: int,
                        ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The agents discuss each task once (the sampler's decoding, greedy for evaluation). The discussion's
    answer is the vote of its last round's solutions (``accuracy``); also the first round's vote, the vote over
    every round and the share of last-round solutions that are right."""
    records = [discussion_record(d) for start in range(0, len(tasks), batch_size)
               for d in sampler.discuss(tasks[start:start + batch_size], 1, max_new_tokens)]
    grades = [g for r in records for g in r["grades"]]
    count = max(1, len(records))
    summary = {"accuracy": sum(r["final"] for r in records) / count,
               "first_round_accuracy": sum(r["first_round"] for r in records) / count,
               "majority_accuracy": sum(r["majority"] for r in records) / count,
               "final_share": sum(r["final_share"] for r in records) / count,
               "grade_parse_rate": sum(g is not None for g in grades) / max(1, len(grades))}
    return summary, records


def discussion_metrics(groups: list[Group]) -> dict[str, float]:
    """Per role its mean reward (rewarded turns); the scorers' parse rate; and how often the solvers'
    training answers were right, for the log only."""
    samples = [s for g in groups for s in g.samples if "role" in s.info]
    metrics = {}
    for role in ROLES:
        played = [s for s in samples if s.info["role"] == role]
        rewarded = [s.info["return"] for s in played if math.isfinite(s.info["return"])]
        if rewarded:
            metrics[f"discussion/{role}_reward"] = sum(rewarded) / len(rewarded)
        if role == "scorer" and played:
            metrics["discussion/grade_parse_rate"] = sum(s.info["grade"] is not None for s in played) / len(played)
    solved = [verifier_reward(g.task, s.text) for g in groups for s in g.samples if s.info.get("role") == "solver"]
    if solved:
        metrics["discussion/solver_accuracy"] = sum(solved) / len(solved)
    return metrics
