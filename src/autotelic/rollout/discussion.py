"""CoMAS (Xue et al. 2025, "CoMAS: Co-Evolving Multi-Agent Systems via Interaction Rewards"): agents
improve by discussing problems, each rewarded by the others' judgments, never by the answer key.

Each task gets ``size`` independent discussions of ``rounds`` rounds. In every round three agents take
turns (``seats``): the solver answers (from round 1 on, its prompt shows every earlier round's answer,
critique and grade), the evaluator lists the errors of that answer, and the scorer, shown both, grades
the answer from ``low`` to ``high``. Seats move on by one agent per round and per task of the batch, so
every agent plays every role in a step that has as many tasks (or discussions as many rounds) as there are
agents. With three or more agents a round's three seats are distinct agents; with two, the solver grades
its own answer (as scorer it is paid for a readable grade only, never by the grade it gives); with one, it
plays every role (the single-agent ablation).

Rewards (``round_rewards``), in ``info["return"]`` for the ``env`` reward:
- solver: the grade normalised to [0, 1], s = (g - low) / (high - low);
- evaluator: 1 - s, so a critique that sinks a bad answer pays and one that sinks a good answer costs;
- scorer: 0 for a grade that parses (``rewards.judge.parse_score``), ``unparsed_penalty`` otherwise; a
  readable grade is the one part of its job the others cannot judge, so that alone is rewarded.
A round whose grade does not parse says nothing about its answer or critique: those two turns get nan
and go to a group of their own, which the Filter drops as unscorable (logged, never trained).

Groups: one per task, round and role, holding that turn of the task's ``size`` discussions. One agent
plays a role in a round of a task, so each group is one agent's (``task.meta["agent"]``; ``Group.agent``) and
the discussions of a task are its group-relative baseline, as selfplay's games are. From round 1 on the
discussions' prompts differ: a group's ``prompt_ids`` are what they share, the rest of each sample's
prompt starts it, masked. ``task.answer`` is read only by ``evaluate_discussion`` and
``discussion_metrics``, to report accuracy.

Choices of this implementation where the paper leaves room or the CPU budget decides: one answer per
round, a 1-3 scale, a scorer turn capped at ``grade_tokens``, unreadable grades leaving their round
unrewarded rather than scored at a default, and every agent its own model.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from autotelic.backends import PolicyBackend
from autotelic.rewards.judge import parse_score
from autotelic.rewards.majority import default_extract, majority_answer
from autotelic.rollout.filter import verifier_reward
from autotelic.rollout.generate import PolicySampler, common_prefix, sizes_per_task, under_shared_prompt
from autotelic.types import Group, Sample, Task

ROLES = ("solver", "evaluator", "scorer")
SOLVER, EVALUATOR, SCORER = range(len(ROLES))
LOGGED_INFO = ("agent", "role", "round", "discussion", "grade")  # sample facts rollouts.jsonl records


def seats(task_index: int, round_index: int, agents: int) -> tuple[int, ...]:
    """The agents playing solver, evaluator and scorer: consecutive agents from an offset that moves on by
    one per round and per task, so the roles rotate."""
    first = task_index + round_index
    return tuple((first + role) % agents for role in range(len(ROLES)))


# ---- what each role is asked ------------------------------------------------------------------
def show_grade(grade: float | None, high: int) -> str:
    return "unreadable" if grade is None else f"{grade:g} out of {high}"


# What differs between a task's discussions comes last in each message: the longer the prefix they share,
# the less of each prompt the update has to run per sample (see ``role_groups``).
def solver_message(problem: str, earlier: list[tuple[str, str, str]]) -> str:
    """Round 0: the problem as it is, so a first answer is the agent's plain answer. Later rounds: the
    problem, then each earlier (answer, critique, grade)."""
    if not earlier:
        return problem
    lines = [problem, "", "Earlier answers to this problem and their reviews:"]
    for number, (answer, critique, grade) in enumerate(earlier, 1):
        lines += [f"{number}. Answer: {answer}", f"   Review: {critique}", f"   Grade: {grade}"]
    return "\n".join([*lines, "", "Using the reviews, give your answer."])


def evaluator_message(problem: str, answer: str) -> str:
    return ("List the errors in the proposed answer to this problem, briefly. If it is correct, say so.\n\n"
            f"Problem: {problem}\n\nProposed answer: {answer}")


def scorer_message(problem: str, answer: str, critique: str, low: int, high: int) -> str:
    return (f"Grade the proposed answer to this problem from {low} (wrong) to {high} (correct), using the review. "
            f"Reply with only the grade.\n\nProblem: {problem}\n\nProposed answer: {answer}\n\nReview: {critique}"
            f"\n\nGrade ({low}-{high}):")  # ending on the request: the embedded model then writes a grade more often


@dataclass(frozen=True)
class RoundRewards:
    grade: float | None  # the scorer's grade on its scale; None when it does not parse
    returns: tuple[float, float, float]  # solver, evaluator, scorer (nan: no reward)


def round_rewards(grade_reply: str, low: int, high: int, unparsed_penalty: float) -> RoundRewards:
    """Each role's reward from the scorer's reply (see the module docstring)."""
    grade = parse_score(grade_reply, low, high)
    if grade is None:
        return RoundRewards(None, (math.nan, math.nan, unparsed_penalty))
    score = (grade - low) / (high - low)
    return RoundRewards(grade, (score, 1.0 - score, 0.0))


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
    rounds: list[list[Turn]] = field(default_factory=list)  # per round, its turns so far in role order

    @property
    def uid(self) -> str:
        return f"{self.task.uid}#{self.index}"

    def earlier(self, high: int) -> list[tuple[str, str, str]]:
        """(answer, critique, grade) of every complete round."""
        return [(turns[SOLVER].sample.text, turns[EVALUATOR].sample.text,
                 show_grade(turns[SCORER].sample.info.get("grade"), high))
                for turns in self.rounds if len(turns) == len(ROLES)]

    def message(self, role: int, low: int, high: int) -> str:
        """What ``role`` is asked next, from the discussion so far (the current round's earlier turns)."""
        problem = self.task.prompt
        if role == SOLVER:
            return solver_message(problem, self.earlier(high))
        current = [turn.sample.text for turn in self.rounds[-1]]
        if role == EVALUATOR:
            return evaluator_message(problem, current[SOLVER])
        return scorer_message(problem, current[SOLVER], current[EVALUATOR], low, high)


def reward_round(discussion: Discussion, round_index: int, low: int, high: int, unparsed_penalty: float) -> None:
    """Label a finished round's samples: its rewards (``info["return"]``), grade, roles, agents."""
    turns = discussion.rounds[round_index]
    rewards = round_rewards(turns[SCORER].sample.text, low, high, unparsed_penalty)
    for role, (turn, reward) in enumerate(zip(turns, rewards.returns)):
        turn.sample.info.update({"return": reward, "grade": rewards.grade, "agent": turn.agent,
                                 "role": ROLES[role], "round": round_index, "discussion": discussion.uid})


def role_groups(discussions: list[Discussion], round_index: int, role: int) -> list[Group]:
    """One task's turns in ``role`` in round ``round_index``, as a group per agent: the rewarded turns, and
    apart from them those without a reward (nan, their grade unreadable), which the Filter drops."""
    task = discussions[0].task
    turns = [d.rounds[round_index][role] for d in discussions]
    groups = []
    for rewarded in (True, False):
        chosen = [t for t in turns if math.isfinite(t.sample.info["return"]) == rewarded]
        if not chosen:
            continue
        shared = common_prefix([t.prompt_ids for t in chosen])
        for turn in chosen:
            under_shared_prompt(turn.sample, turn.prompt_ids, shared)
        role_task = dataclasses.replace(
            task, prompt=chosen[0].message, uid=f"{task.uid}/r{round_index}/{ROLES[role]}",
            meta={**task.meta, "agent": chosen[0].agent, "role": ROLES[role], "round": round_index})
        groups.append(Group(role_task, shared, [t.sample for t in chosen]))
    return groups


@dataclass
class DiscussionSampler:
    """``size`` discussions per task among ``agents``; a group per task, round and role (module docstring)."""

    agents: list[PolicyBackend]
    rounds: int = 2
    low: int = 1
    high: int = 3
    unparsed_penalty: float = -1.0
    grade_tokens: int = 8  # a grade is a number: the scorer's turns stop early
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
        """Every discussion, played round by round; each turn is one batched call per agent."""
        discussions = [Discussion(task, t, d) for t, (task, size) in enumerate(zip(tasks, sizes_per_task(sizes,
                       len(tasks)))) for d in range(size)]
        for r in range(self.rounds):
            for discussion in discussions:
                discussion.rounds.append([])
            for role in range(len(ROLES)):
                self._turn(discussions, role, max_new_tokens)
            for discussion in discussions:
                reward_round(discussion, r, self.low, self.high, self.unparsed_penalty)
        return discussions

    def _turn(self, discussions: list[Discussion], role: int, max_new_tokens: int) -> None:
        by_agent: dict[int, list[tuple[Discussion, str]]] = defaultdict(list)
        for discussion in discussions:
            agent = seats(discussion.task_index, len(discussion.rounds) - 1, len(self.agents))[role]
            by_agent[agent].append((discussion, discussion.message(role, self.low, self.high)))
        budget = min(self.grade_tokens, max_new_tokens) if role == SCORER else max_new_tokens
        for agent, asked in by_agent.items():
            sampler = PolicySampler(self.agents[agent], self.temperature, self.top_p, self.greedy)
            turn_tasks = [dataclasses.replace(d.task, prompt=message, response_prefix="") for d, message in asked]
            for (discussion, message), group in zip(asked, sampler.generate(turn_tasks, 1, budget)):
                discussion.rounds[-1].append(Turn(agent, message, group.prompt_ids, group.samples[0]))


# ---- reporting (the answer key is read here only) ------------------------------------------------
def discussion_record(discussion: Discussion) -> dict[str, Any]:
    """A discussion's answers scored by the task's verifier: the last round's, the first round's (the first
    solver's plain answer) and the majority's: the earliest answer whose extracted answer won the vote over
    every round, scored as written, so that no format is forgiven that the others are held to."""
    task = discussion.task
    answers = [turns[SOLVER].sample.text for turns in discussion.rounds]
    extracted = [default_extract(a) for a in answers]
    vote, _ = majority_answer(extracted)
    voted = answers[extracted.index(vote)] if vote is not None else answers[-1]
    return {"family": task.family, "level": task.level, "prompt": task.prompt, "answer": task.answer,
            "final": verifier_reward(task, answers[-1]), "first_round": verifier_reward(task, answers[0]),
            "majority": verifier_reward(task, voted),
            "turns": [{"agent": t.agent, "role": ROLES[role], "text": t.sample.text}
                      for turns in discussion.rounds for role, t in enumerate(turns)],
            "grades": [turns[SCORER].sample.info["grade"] for turns in discussion.rounds]}


def evaluate_discussion(sampler: DiscussionSampler, tasks: list[Task], max_new_tokens: int, batch_size: int,
                        ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The agents discuss each task once (the sampler's decoding, greedy for evaluation). The group's answer
    is the last round's solution (``accuracy``); also the first round's and a majority over all rounds."""
    records = [discussion_record(d) for start in range(0, len(tasks), batch_size)
               for d in sampler.discuss(tasks[start:start + batch_size], 1, max_new_tokens)]
    grades = [g for r in records for g in r["grades"]]
    count = max(1, len(records))
    summary = {"accuracy": sum(r["final"] for r in records) / count,
               "first_round_accuracy": sum(r["first_round"] for r in records) / count,
               "majority_accuracy": sum(r["majority"] for r in records) / count,
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
