"""Held-out evaluation on a fixed task set the trainer never draws from.

Decoding strategies, compared at the same completion-token budget per task: ``greedy``;
``best_of_n`` (samples while another whole one fits in the budget, the answer picked by the value
model or, as an oracle upper bound, by the verifier); ``vm_mcts`` (line-level tree search guided by the value
model, which also picks the final answer). Each record notes the tokens its task spent.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotelic.backends import PolicyBackend
from autotelic.config import SearchConfig
from autotelic.rewards.process_value import process_scores
from autotelic.rollout.filter import verifier_reward
from autotelic.rollout.generate import PolicySampler, RolloutWorker
from autotelic.search import ValueEvaluator, best_response, search
from autotelic.types import Sample, Task
from autotelic.value_model import ValueModel

DECODINGS = ("greedy", "best_of_n", "vm_mcts")


@dataclass
class EvalResult:
    accuracy: float
    by_family: dict[str, float]
    by_level: dict[str, float]
    records: list[dict[str, Any]] = field(default_factory=list)
    decoding: str = "greedy"
    tokens_per_task: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "by_family": self.by_family, "by_level": self.by_level,
                "decoding": self.decoding, "tokens_per_task": round(self.tokens_per_task, 1)}


def correct(reward: float) -> float:
    """Reported accuracy is strict: a task counts only when fully solved. Partial credit (a graded verifier,
    an episode's shaped return) may pay training, never this."""
    return float(reward >= 1.0)


def _mean_by(records: list[dict[str, Any]], key: str) -> dict[str, float]:
    buckets: dict[str, list[float]] = defaultdict(list)
    for record in records:
        buckets[str(record[key])].append(record["correct"])
    return {name: sum(v) / len(v) for name, v in sorted(buckets.items())}


def _result(records: list[dict[str, Any]], decoding: str) -> EvalResult:
    """Strict accuracy overall, by family and by level, and the tokens a task spent, from per-task records."""
    count = max(1, len(records))
    return EvalResult(sum(r["correct"] for r in records) / count, _mean_by(records, "family"),
                      _mean_by(records, "level"), records, decoding, sum(r["tokens"] for r in records) / count)


@dataclass
class Decoding:
    """How held-out answers are produced: ``greedy``, ``best_of_n`` or ``vm_mcts`` (see EvalConfig)."""

    strategy: str = "greedy"
    token_budget: int | None = None
    select_by: str = "value"
    value_model: ValueModel | None = None
    search: SearchConfig = field(default_factory=SearchConfig)

    def budget(self, max_new_tokens: int) -> int:
        return self.token_budget if self.token_budget is not None else 4 * max_new_tokens

    def check(self) -> None:
        if self.strategy not in DECODINGS:
            raise ValueError(f"unknown decoding '{self.strategy}'; valid: {', '.join(DECODINGS)}")
        needs_value = self.strategy == "vm_mcts" or self.strategy == "best_of_n" and self.select_by != "verifier"
        if needs_value and self.value_model is None:
            raise ValueError(f"decoding {self.strategy} (select_by={self.select_by}) needs a value model: set "
                             "eval.value_model to a directory made by `autotelic value`")


@dataclass
class Answer:
    text: str
    tokens: int  # completion tokens the task spent
    candidates: list[str] = field(default_factory=list)  # best-of-n: every sample it chose among


def _greedy(policy: PolicyBackend, tasks: list[Task], max_new_tokens: int) -> list[Answer]:
    groups = PolicySampler(policy, greedy=True).generate(tasks, 1, max_new_tokens)
    return [Answer(g.samples[0].text, len(g.samples[0].token_ids)) for g in groups]


def pick(task: Task, texts: list[str], select_by: str, value_model: ValueModel | None) -> str:
    """The candidate best-of-n answers with: the verifier's best (the oracle), the weakest step's value (the value
    model read as a PRM) or the value of the whole answer (an outcome reward model)."""
    if select_by == "verifier":
        scores = [verifier_reward(task, text) for text in texts]
    elif select_by == "process_value":
        scores = process_scores(value_model.predict, task, texts)
    else:
        scores = value_model.predict([(task.prompt, task.full_response(t)) for t in texts])
    return texts[max(range(len(texts)), key=scores.__getitem__)]


def _best_of_n(policy: PolicyBackend, tasks: list[Task], max_new_tokens: int, decoding: Decoding) -> list[Answer]:
    """Samples while another whole sample fits in the task's token budget (a sample may run to its cap, so the
    budget is never exceeded); then the best one. The budget // cap samples that always fit come from one call (the
    prompt computed once for all of them), then one per task per wave while another fits."""
    budget = decoding.budget(max_new_tokens)
    cap = min(max_new_tokens, budget)
    sampler = PolicySampler(policy, temperature=decoding.search.temperature)
    groups = sampler.generate(tasks, budget // cap, cap)
    candidates = [[sample.text for sample in group.samples] for group in groups]
    spent = [sum(len(sample.token_ids) for sample in group.samples) for group in groups]
    while True:
        open_rows = [i for i in range(len(tasks)) if spent[i] + cap <= budget]
        if not open_rows:
            break
        for i, group in zip(open_rows, sampler.generate([tasks[i] for i in open_rows], 1, cap)):
            candidates[i].append(group.samples[0].text)
            spent[i] += len(group.samples[0].token_ids)
    return [Answer(pick(task, texts, decoding.select_by, decoding.value_model), tokens, texts)
            for task, texts, tokens in zip(tasks, candidates, spent)]


def _vm_mcts(policy: PolicyBackend, tasks: list[Task], max_new_tokens: int, decoding: Decoding) -> list[Answer]:
    cfg = decoding.search
    budget = decoding.budget(max_new_tokens)
    trees = search(policy, tasks, ValueEvaluator(policy, decoding.value_model), iterations=budget,
                   children=cfg.children, step_tokens=cfg.step_tokens, max_new_tokens=max_new_tokens,
                   temperature=cfg.temperature, c_uct=cfg.c_uct, token_budget=budget, cache_mb=cfg.cache_mb)
    return [Answer(best_response(tree, policy, max_new_tokens, budget), tree.tokens_spent) for tree in trees]


def _record(task: Task, answer: Answer) -> dict[str, Any]:
    return {"family": task.family, "level": task.level, "prompt": task.prompt, "answer": task.answer,
            "completion": answer.text, "tokens": answer.tokens,
            "reward": (reward := verifier_reward(task, answer.text)), "correct": correct(reward),
            **({"candidates": answer.candidates} if answer.candidates else {})}


def reselect(tasks: Sequence[Task], records: Sequence[dict[str, Any]], select_by: str,
             value_model: ValueModel | None = None) -> EvalResult:
    """Best-of-n's held-out answers picked again among the candidates it sampled (``records`` from a best_of_n
    evaluation of ``tasks``), by another ``select_by``: selections compared on the same samples and the same
    tokens, with no new decoding."""
    if [t.prompt for t in tasks] != [r["prompt"] for r in records] or any("candidates" not in r for r in records):
        raise ValueError("reselect needs the best_of_n records of these very tasks, in their order, with their "
                         "candidates (written since commit 5a37dd5)")
    return _result([_record(task, Answer(pick(task, r["candidates"], select_by, value_model), r["tokens"],
                                         r["candidates"]))
                    for task, r in zip(tasks, records)], f"best_of_n:{select_by}")


def episode_reward(sample: Sample) -> float:
    """An episode's held-out score: the environment's success check where it has one (web), else its
    return (the tool and game environments pay the final answer by the task's verifier)."""
    steps = sample.info.get("steps", [])
    if steps and "success" in steps[-1]:
        return float(steps[-1]["success"])
    return float(sample.info["return"])


def evaluate_episodes(agent: RolloutWorker, tasks: Sequence[Task], max_new_tokens: int, batch_size: int = 64,
                      ) -> EvalResult:
    """One episode per task by ``agent`` (the policy alone, greedy, or the operator agent)."""
    records = []
    for start in range(0, len(tasks), batch_size):
        for group in agent.generate(tasks[start:start + batch_size], 1, max_new_tokens):
            sample, task = group.samples[0], group.task
            steps = sample.info.get("steps", [])
            records.append({"family": task.family, "level": task.level, "prompt": task.prompt, "answer": task.answer,
                            "completion": sample.text, "tokens": len(sample.token_ids), "turns": sample.info["turns"],
                            "reward": (reward := episode_reward(sample)), "correct": correct(reward),
                            **({"actions": [s.get("action") for s in steps]} if any("action" in s for s in steps)
                               else {})})
    return _result(records, "episode")


def pass_at_k(samples: int, correct_samples: int, k: int) -> float:
    """The unbiased pass@k of a task from ``samples`` attempts of which ``correct_samples`` succeeded (Chen et al.
    2021): 1 - C(n - c, k) / C(n, k), the chance that k attempts drawn without replacement include a success."""
    if not 1 <= k <= samples:
        raise ValueError(f"pass@{k} needs 1 <= k <= the {samples} samples per task")
    return 1.0 - math.comb(samples - correct_samples, k) / math.comb(samples, k)


def evaluate_pass_at_k(worker: RolloutWorker, tasks: Sequence[Task], samples: int, ks: Sequence[int],
                       max_new_tokens: int, score: Callable[[Task, Sample], float], batch_size: int = 64,
                       ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """pass@k for each k of ``ks``, from ``samples`` sampled attempts per task by ``worker`` (answers, or whole
    episodes), each strict by ``score``; and a record per task (its attempts and successes)."""
    records, chunk = [], max(1, batch_size // samples)  # tasks per call: about batch_size attempts
    for start in range(0, len(tasks), chunk):
        for group in worker.generate(list(tasks[start:start + chunk]), samples, max_new_tokens):
            task = group.task
            records.append({"family": task.family, "level": task.level, "prompt": task.prompt,
                            "samples": len(group.samples),
                            "successes": sum(correct(score(task, s)) for s in group.samples)})
    summary = {f"pass@{k}": sum(pass_at_k(r["samples"], int(r["successes"]), k) for r in records) / max(1, len(records))
               for k in ks}
    return summary, records


def evaluate(policy: PolicyBackend, tasks: Sequence[Task], max_new_tokens: int, batch_size: int = 64,
             decoding: Decoding | None = None) -> EvalResult:
    """One answer per task, by the decoding strategy (greedy by default), scored by each family's verifier."""
    decoding = decoding or Decoding()
    decoding.check()
    records = []
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start:start + batch_size]
        if decoding.strategy == "greedy":
            answers = _greedy(policy, chunk, max_new_tokens)
        elif decoding.strategy == "best_of_n":
            answers = _best_of_n(policy, chunk, max_new_tokens, decoding)
        else:
            answers = _vm_mcts(policy, chunk, max_new_tokens, decoding)
        records.extend(_record(task, answer) for task, answer in zip(chunk, answers))
    return _result(records, decoding.strategy)
