"""ReST-GRPO's partial-solution prompts (ReST-RL, Zhoubian et al. 2025).

A problem whose group's rewards spread (std at least ``min_std``) and whose best answer is (nearly) right
(reward at least ``min_reward``) is cut into partial-solution prompts: the best answer's first k code lines,
for k from 1 to all but the last, the solver continuing from the cut. As in the official ReST-RL code (``process``
in ``experiment/process_gen_data.py``, ``utils/sample_utils.py``): ceil(lines x ``per_line``) cuts are drawn,
with replacement, with weight ``decay**(k - 1)``, so early cuts (long continuations) are preferred; the
defaults are theirs (0.05, 0.9, 0.5, 0.95).

``PrefixCurriculum`` wraps any curriculum: it harvests the best answers of the groups it observes and serves a
share of each step's tasks from the prefixes it made (the online mix). With ``iteration_steps`` K it follows
ReST-GRPO's iterations instead: every K steps it assembles a training set from what the last K steps observed
(the problems whose groups spread, and the prefixes cut from their best answers), shuffled, and serves it first
for the next K steps (one epoch at most: what is left when the next set is assembled is dropped), the base
curriculum filling the rest of each step; the first K steps draw from the base alone.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from autotelic.curricula.base import Curriculum, DerivedTaskQueue
from autotelic.curricula.rngstate import rng_state, set_rng_state
from autotelic.types import Group, Task

_FENCE = "```"


def line_prefixes(response: str, tokenize: Callable[[str], list[int]]) -> list[str]:
    """The response's first k code lines, for k = 1 .. all but the last: inside the first fenced code block when
    there is one (prose before it stays in every prefix), else over all lines. Each cut falls where the policy's
    tokens of the whole response break (``tokenize``, the policy's tokenizer), as late in the whitespace before
    the next line's first word as one does: a byte-level BPE writes ``"\n    return"`` as ``"\n   "`` then
    ``" return"``, and a prefix cut after the fourth space would leave the policy to write ``" return"``, five
    spaces deep. A line with no such break is no cut point. A prefix of the whole code is not cut: its
    continuation could only close the block (the official code draws it, and its groups are all alike)."""
    lines = response.splitlines(keepends=True)
    fences = [i for i, line in enumerate(lines) if line.lstrip().startswith(_FENCE)]
    first, last = (fences[0] + 1, fences[1] if len(fences) > 1 else len(lines)) if fences else (0, len(lines))
    code_lines = [i for i in range(first, last) if lines[i].strip()]
    starts = list(itertools.accumulate(map(len, lines), initial=0))
    whole = tokenize(response)
    cuts = [_token_break(response, starts[i] + len(lines[i]) - len(lines[i].lstrip()), whole, tokenize)
            for i in code_lines[1:]]
    return [response[:cut] for cut in cuts if cut is not None]


def _token_break(text: str, word: int, whole: list[int], tokenize: Callable[[str], list[int]]) -> int | None:
    """The last position in the whitespace before ``text[word]`` (keeping at least its first character, the
    newline) where the tokens of what comes before are the first tokens of ``whole``."""
    space = word
    while space > 0 and text[space - 1].isspace():
        space -= 1
    for cut in range(word, space, -1):
        ids = tokenize(text[:cut])
        if whole[:len(ids)] == ids:
            return cut
    return None


def choose_prefixes(prefixes: list[str], per_line: float, decay: float, rng: random.Random) -> list[str]:
    """ceil(len(prefixes) x per_line) prefixes, drawn with replacement with weight decay**(k - 1) for the
    prefix of k lines: early cuts first (ReST-RL's ``weighted_sample``)."""
    if not prefixes:
        return []
    count = math.ceil(len(prefixes) * per_line)
    return rng.choices(prefixes, weights=[decay ** k for k in range(len(prefixes))], k=count)


def prefix_task(task: Task, prefix: str) -> Task:
    """The task with its reply started at ``prefix``, marked so other layers know the reply continues a cut (a
    plain response_prefix, such as the web tasks' "Action:", starts every reply afresh)."""
    return replace(task, uid=f"{task.uid}#prefix{len(prefix)}", response_prefix=prefix,
                   meta={**task.meta, "partial_solution": True})


@dataclass
class PrefixCurriculum(DerivedTaskQueue):
    base: Curriculum
    fraction: float = 0.25
    """Share of each step's tasks served from partial-solution prompts (when any are queued)."""
    per_line: float = 0.5
    decay: float = 0.95
    min_reward: float = 0.9
    """A group's best answer is cut into prefixes when its reward reaches this ..."""
    min_std: float = 0.05
    """... and the group's rewards spread at least this much (population std)."""
    capacity: int = 256
    """Prefixes kept waiting at most; the oldest are forgotten first."""
    seed: int = 0
    iteration_steps: int = 0
    """ReST-GRPO iterations of this many steps (0: the online mix, ``fraction`` of each step)."""
    queue: deque[Task] = field(default_factory=deque)
    served: int = 0
    harvest: list[Task] = field(default_factory=list)
    """Iterations: the problems and prefixes this iteration observed, assembled into the next one's set."""
    steps: int = 0
    tokenize: Callable[[str], list[int]] | None = None
    """The policy's tokenizer, where the cuts fall (set by ``build_pipeline`` once the policy has loaded)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.rng = random.Random(f"prefixes/{self.seed}")

    def next_tasks(self, count: int) -> list[Task]:
        if not self.iteration_steps:
            return super().next_tasks(count)
        assembled = [self.queue.popleft() for _ in range(min(count, len(self.queue)))]
        self.served += len(assembled)
        return assembled + self.base.next_tasks(count - len(assembled))

    def observe(self, groups: list[Group]) -> dict[str, float]:
        original = [g for g in groups if not g.task.response_prefix]
        metrics = self.base.observe(original)
        made = 0
        for group in original:
            best = max(group.samples, key=lambda s: s.reward if s.reward is not None else float("-inf"))
            spread = statistics.pstdev(group.rewards) if len(group.samples) > 1 else 0.0
            if spread < self.min_std:
                continue
            if self.iteration_steps:  # a problem whose group spreads is trained on again, solved or not
                self.harvest.append(group.task)
            if best.reward is None or best.reward < self.min_reward:
                continue
            if self.tokenize is None:
                raise RuntimeError("partial-solution prompts are cut at the policy's tokens: set tokenize first")
            cuts = line_prefixes(best.text, self.tokenize)
            chosen = [prefix_task(group.task, prefix) for prefix in choose_prefixes(cuts, self.per_line, self.decay,
                                                                                    self.rng)]
            (self.harvest if self.iteration_steps else self.queue).extend(chosen)
            made += len(chosen)
        self.steps += 1
        if self.iteration_steps and self.steps % self.iteration_steps == 0:  # assemble the next iteration's set
            self.rng.shuffle(self.harvest)
            self.queue = deque(self.harvest[:self.capacity], maxlen=self.capacity)
            self.harvest = []
            metrics["prefix/assembled"] = float(len(self.queue))
        prefixed = [g for g in groups if g.task.response_prefix]
        rewards = [r for g in prefixed for r in g.rewards]
        metrics.update({"prefix/made": float(made), "prefix/queued": float(len(self.queue)),
                        "prefix/served_total": float(self.served)})
        if rewards:
            metrics["prefix/reward_mean"] = sum(rewards) / len(rewards)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {**self.queue_state(), "rng": rng_state(self.rng), "harvest": list(self.harvest), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_queue_state(state)
        set_rng_state(self.rng, state["rng"])
        self.harvest, self.steps = list(state["harvest"]), state["steps"]
