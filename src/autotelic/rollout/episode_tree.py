"""Tree rollouts for multi-turn episodes, branching at turn boundaries (``episode.tree_roots``).

A group starts fewer episodes than its size (the roots); after each of ``branch_turns`` every episode of the group
is copied, evenly, until the group holds its share of leaves (all of them at the last branch point). A copy of an
episode still going gets a fresh environment replayed through the actions its parent sent (so environments must
be deterministic given the task and the actions: the replay's last observation is checked against the parent's);
a copy of an episode already over is that episode again, the whole subtree it stands for. Copies share their
parent's turns token for token, so their next turn is one prefill sampled several times (``next_turns``), and the
siblings differ only after the branch point: at equal episodes a group decodes fewer turns than independent
episodes, and siblings contrast the later actions from the same state (TreeRL's argument, at the granularity an
agent acts in). Each episode trains as a whole sample: a shared turn is trained once per leaf that carries it, with
that leaf's advantage. A demonstrated episode (``curricula/hints.py``) is one leaf besides the roots, never
copied.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

from autotelic.envs import Environment, call_all
from autotelic.types import Group, Sample, Task

Episode = tuple[Environment | None, Sample, list[int], str]  # env (None once over), sample, prompt, response prefix


class ReplayError(RuntimeError):
    """An environment answered a replayed action differently from the episode it replays."""


@dataclass(frozen=True)
class EpisodeTree:
    roots: int
    branch_turns: tuple[int, ...]

    def starts(self, size: int, demonstrated: bool = False) -> int:
        """Episodes a group starts: the roots, and a demonstration besides them (never copied, so it is no root)."""
        return min(self.roots + demonstrated, size)

    def leaves(self, size: int, after: int) -> int:
        """The group's episodes after branch point ``after`` (a turn count): geometric from the roots to ``size``."""
        point = self.branch_turns.index(after) + 1
        if point == len(self.branch_turns):
            return size
        roots = self.starts(size)
        return round(roots * (size / roots) ** (point / len(self.branch_turns)))

    def branch(self, after: int, groups: list[Group], sizes: list[int], episodes: list[Episode],
               active: list[Episode], sent: dict[int, list[str]], scripted: set[int],
               make_env: Callable[[], Environment]) -> list[Episode]:
        """Copy the groups' episodes up to their leaves after ``after`` turns; returns the episodes still going
        (``episodes`` and ``sent`` gain the copies). ``sent``: id(sample) -> the actions its environment read."""
        of_sample = {id(e[1]): e for e in episodes}
        going = {id(e[1]) for e in active}
        forks: list[tuple[Sample, list[int], str, Task]] = []  # copies of episodes still going, to replay
        for group, size in zip(groups, sizes):
            position = {id(s): i for i, s in enumerate(group.samples)}
            parents = [s for s in group.samples if id(s) not in scripted]
            for i in range(self.leaves(size, after) - len(group.samples) if parents else 0):
                parent = parents[i % len(parents)]
                child = copy.deepcopy(parent)
                child.info["forked"] = {"from": position[id(parent)], "after_turn": after}
                group.samples.append(child)
                sent[id(child)] = list(sent.get(id(parent), []))
                _, _, prompt, prefix = of_sample[id(parent)]
                if id(parent) in going:
                    forks.append((child, prompt, prefix, group.task))
                else:
                    episodes.append((None, child, prompt, prefix))
        envs = replay([(make_env(), task, sent[id(child)]) for child, _, _, task in forks],
                      [child.info["observations"][-1] for child, _, _, _ in forks])
        started = [(env, child, prompt, prefix) for env, (child, prompt, prefix, _) in zip(envs, forks)]
        episodes += started
        return active + started


def replay(starts: list[tuple[Environment, Task, list[str]]], expected: list[str]) -> list[Environment]:
    """Reset each environment to its task and step it through its actions, all side by side (``call_all``);
    each must end on its ``expected`` observation."""
    envs = [env for env, _, _ in starts]
    call_all([(env, "reset", task) for env, task, _ in starts])
    last = [""] * len(starts)
    for turn in range(max((len(actions) for _, _, actions in starts), default=0)):
        due = [i for i, (_, _, actions) in enumerate(starts) if turn < len(actions)]
        for i, step in zip(due, call_all([(envs[i], "step", starts[i][2][turn]) for i in due])):
            last[i] = step.observation
    for env, seen, wanted in zip(envs, last, expected):
        if seen != wanted:
            for opened in envs:
                opened.close()
            raise ReplayError(f"{type(env).__name__} answered a replayed episode differently ({seen[:80]!r} instead "
                              f"of {wanted[:80]!r}): episode.tree_roots needs an environment that is deterministic "
                              "given the task and the actions; set episode.tree_roots=0")
    return envs
