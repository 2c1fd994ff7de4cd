"""Monte-Carlo tree search over partial responses, one line per step (ReST-RL's VM-MCTS).

A node is a response prefix. Expanding a leaf samples ``children`` next lines from the policy (a
step ends at a line end, at end of sequence or after ``step_tokens``); UCT picks the path to the
next leaf. New children are evaluated by one of two evaluators:

- ``RolloutEvaluator`` (collecting value targets): the policy completes the response and the task's
  reward (unit tests in the sandbox for code) scores it. A node's mean over the rollouts below it is
  the value model's training target: labels without annotation.
- ``ValueEvaluator`` (decoding): the value model predicts the node's value; no test runs.

All trees advance in lockstep, so every expansion and every evaluation is one batched call.
Progressive widening: a node whose children are all exhausted is expanded again (more lines
sampled from it) until an expansion adds no line it does not have; only then, or when terminal, is
it exhausted. Without it a near-deterministic policy (every sample opens with the same code fence)
exhausts its root after one or two answers and leaves most of a token budget unspent. A tree stops
when its root is exhausted, its iterations are spent or its completion-token budget is (less of it
left than a token per child); every sampled token counts toward the budget, duplicate lines
included, and so does the greedy completion of an answer the search did not finish, which gets
only what is left: no tree spends more than its budget.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Protocol

from autotelic.backends import Completion, PolicyBackend, PrefixCache
from autotelic.config import SearchConfig
from autotelic.types import Task
from autotelic.value_model import ValueExample, ValueModel

ResponseScorer = Callable[[Task, list[str]], list[float]]
"""Rewards for completions of one task (what follows its ``response_prefix``)."""


@dataclass
class Node:
    token_ids: list[int]  # the whole response so far
    parent: int | None
    terminal: bool  # ended with end-of-sequence or at the token cap
    visits: int = 0
    value_sum: float = 0.0
    estimate: float | None = None  # the evaluator's value of this node itself
    children: list[int] = field(default_factory=list)
    saturated: bool = False  # a widening of it sampled only lines it already has

    @property
    def exhausted(self) -> bool:
        """Nothing left to search below it. A node is widened only once its children are all exhausted, so a
        saturated node's are too."""
        return self.terminal or self.saturated

    @property
    def q(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0


@dataclass
class SearchTree:
    task: Task
    prompt_ids: list[int]
    nodes: list[Node]
    tokens_spent: int = 0
    iterations: int = 0

    def uct(self, index: int, c: float) -> float:
        node, parent = self.nodes[index], self.nodes[self.nodes[index].parent]
        if node.visits == 0:
            return math.inf
        return node.q + c * math.sqrt(math.log(max(1, parent.visits)) / node.visits)

    def select(self, c: float) -> int:
        """The node to expand: UCT's path down through subtrees not exhausted, ending at a leaf or at a node
        whose children are all exhausted (it widens)."""
        index = 0
        while options := [i for i in self.nodes[index].children if not self.nodes[i].exhausted]:
            index = max(options, key=lambda i: self.uct(i, c))
        return index

    def backpropagate(self, index: int, value: float) -> None:
        node: int | None = index
        while node is not None:
            self.nodes[node].visits += 1
            self.nodes[node].value_sum += value
            node = self.nodes[node].parent

    def finished(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.terminal and n.estimate is not None]


class Evaluator(Protocol):
    def __call__(self, items: list[tuple[SearchTree, int]]) -> list[float]: ...


@dataclass
class RolloutEvaluator:
    """Completes each node with the policy and scores the full response; terminal nodes are scored as
    they are. Every scored full response is kept in ``rollouts`` (exact value examples)."""

    policy: PolicyBackend
    scorer: ResponseScorer
    max_new_tokens: int
    temperature: float = 0.8
    rollouts: list[ValueExample] = field(default_factory=list)

    def __call__(self, items: list[tuple[SearchTree, int]]) -> list[float]:
        responses: list[list[int]] = [tree.nodes[i].token_ids for tree, i in items]
        rows = [k for k, (tree, i) in enumerate(items) if not tree.nodes[i].terminal]
        outputs = generate_capped(self.policy, [items[k][0].prompt_ids + responses[k] for k in rows], 1,
                                  [self.max_new_tokens - len(responses[k]) for k in rows], self.temperature)
        for k, (completion,) in zip(rows, outputs):
            responses[k] = responses[k] + completion.token_ids
            items[k][0].tokens_spent += len(completion.token_ids)
        values = [0.0] * len(items)
        by_task: dict[int, list[int]] = defaultdict(list)
        for k, (tree, _) in enumerate(items):
            by_task[id(tree)].append(k)
        for rows in by_task.values():
            task = items[rows[0]][0].task
            texts = [self.policy.decode(responses[k]) for k in rows]
            for k, text, value in zip(rows, texts, self.scorer(task, texts)):
                values[k] = float(value)
                self.rollouts.append(ValueExample(task.prompt, task.full_response(text), float(value)))
        return values


@dataclass
class ValueEvaluator:
    policy: PolicyBackend
    value_model: ValueModel

    def __call__(self, items: list[tuple[SearchTree, int]]) -> list[float]:
        return self.value_model.predict([(tree.task.prompt, tree.task.full_response(
            self.policy.decode(tree.nodes[i].token_ids))) for tree, i in items])


def search(policy: PolicyBackend, tasks: list[Task], evaluate: Evaluator, *, iterations: int, children: int,
           step_tokens: int, max_new_tokens: int, temperature: float, c_uct: float,
           token_budget: int | None = None, cache_mb: int = SearchConfig.cache_mb) -> list[SearchTree]:
    """Runs MCTS on every task at once; each iteration expands one leaf per tree."""
    line_end = policy.token_ids_containing("\n")
    trees = [SearchTree(task, policy.encode_prompt(task.chat, task.response_prefix), [Node([], None, False)])
             for task in tasks]
    # an expanded leaf continues a sequence an earlier expansion generated, or shares its prompt with one: its
    # attention state is read from there instead of prefilling the prompt and the path again (the weights stay).
    # Each kept node holds its prompt and path again, so they are kept within cache_mb, the newest first.
    prefixes = PrefixCache(max_bytes=cache_mb * 2**20)
    for _ in range(iterations):
        active = [t for t in trees if not t.nodes[0].exhausted
                  and (token_budget is None or token_budget - t.tokens_spent >= children)]
        if not active:
            break
        leaves = [(tree, tree.select(c_uct)) for tree in active]
        # the last expansion of a tree shares what is left of its budget among its children: the budget holds
        caps = [min(step_tokens, max_new_tokens - len(tree.nodes[leaf].token_ids),
                    step_tokens if token_budget is None else (token_budget - tree.tokens_spent) // children)
                for tree, leaf in leaves]
        outputs = generate_capped(policy, [t.prompt_ids + t.nodes[leaf].token_ids for t, leaf in leaves], children,
                                  caps, temperature, stop_token_ids=line_end, prefixes=prefixes)
        new: list[tuple[SearchTree, int]] = []
        for (tree, leaf), completions in zip(leaves, outputs):
            tree.iterations += 1
            tree.tokens_spent += sum(len(c.token_ids) for c in completions)
            node = tree.nodes[leaf]
            lines = _new_lines(completions, {tuple(tree.nodes[c].token_ids[len(node.token_ids):])
                                             for c in node.children})
            node.saturated = not lines
            for completion in lines:
                tokens = node.token_ids + completion.token_ids
                tree.nodes.append(Node(tokens, leaf, completion.finished or len(tokens) >= max_new_tokens))
                node.children.append(len(tree.nodes) - 1)
                new.append((tree, len(tree.nodes) - 1))
        for (tree, index), value in zip(new, evaluate(new) if new else []):
            tree.nodes[index].estimate = value
            tree.backpropagate(index, value)
    return trees


def generate_capped(policy: PolicyBackend, prompts: list[list[int]], n: int, caps: list[int], temperature: float,
                    stop_token_ids: list[int] | tuple[()] = (), prefixes: PrefixCache | None = None,
                    ) -> list[list[Completion]]:
    """One batched call for prompts with different token caps: generate up to the largest, then cut each
    completion at its own cap (a cut completion is unfinished)."""
    if not prompts:
        return []
    outputs = policy.generate(prompts, n, max(caps), temperature, stop_token_ids=stop_token_ids, prefixes=prefixes)
    return [[c if len(c.token_ids) <= cap else Completion(c.token_ids[:cap], c.logprobs[:cap], False,
                                                          c.entropies[:cap]) for c in completions]
            for completions, cap in zip(outputs, caps)]


def _new_lines(completions: list[Completion], have: set[tuple[int, ...]]) -> list[Completion]:
    """Each sampled line once, leaving out those the node already has: identical lines would only split one
    branch's visits."""
    kept = []
    for completion in completions:
        key = tuple(completion.token_ids)
        if key not in have:
            have.add(key)
            kept.append(completion)
    return kept


def value_examples(trees: list[SearchTree], decode: Callable[[list[int]], str]) -> list[ValueExample]:
    """Every visited non-root node as (prompt, partial response, mean reward of the rollouts below it)."""
    return [ValueExample(tree.task.prompt, tree.task.full_response(decode(node.token_ids)), node.q,
                         weight=float(node.visits))
            for tree in trees for node in tree.nodes[1:] if node.visits]


def best_response(tree: SearchTree, policy: PolicyBackend, max_new_tokens: int, token_budget: int | None = None,
                  ) -> str:
    """The finished response of highest estimated value; when search finished none, the most visited
    path is completed greedily, with what is left of ``token_budget`` at most (its tokens count toward
    the tree's spend: an answer the budget cuts stays unfinished)."""
    done = tree.finished()
    if done:
        best = max(done, key=lambda i: tree.nodes[i].estimate)
        return policy.decode(tree.nodes[best].token_ids)
    index = 0
    while tree.nodes[index].children:
        index = max(tree.nodes[index].children, key=lambda i: (tree.nodes[i].visits, tree.nodes[i].q))
    prefix = tree.nodes[index].token_ids
    cap = max_new_tokens - len(prefix)
    if token_budget is not None:
        cap = min(cap, token_budget - tree.tokens_spent)
    if cap <= 0:
        return policy.decode(prefix)
    (completion,), = policy.generate([tree.prompt_ids + prefix], 1, cap, 1.0, greedy=True)
    tree.tokens_spent += len(completion.token_ids)
    return policy.decode(prefix + completion.token_ids)


def collect_value_targets(policy: PolicyBackend, tasks: list[Task], scorer: ResponseScorer, *, iterations: int,
                          config: SearchConfig, max_new_tokens: int) -> list[ValueExample]:
    """MCTS with scored rollouts on ``tasks``: every visited node's mean reward, plus every scored rollout."""
    evaluator = RolloutEvaluator(policy, scorer, max_new_tokens, config.temperature)
    trees = search(policy, tasks, evaluator, iterations=iterations, children=config.children,
                   step_tokens=config.step_tokens, max_new_tokens=max_new_tokens, temperature=config.temperature,
                   c_uct=config.c_uct, cache_mb=config.cache_mb)
    return value_examples(trees, policy.decode) + evaluator.rollouts
