"""The held-out set: drawn once from the config, and handed to every training task source it must stay out of.

Every source that makes training tasks (the bandit's family draws, value-model search tasks, failure cuts,
evolved prompts, proposed questions) takes a ``HeldOut`` in its constructor and never hands out a task it
``excludes``: one with a held-out uid, or with a held-out prompt text (up to case and whitespace) where that
prompt alone identifies its held-out task (uid = ``family:prompt``), whichever family or writer produced it.
A uid is a task's identity: what it asks and what answers it (``tasks.task_uid``), never a draw's seed.

Two splits are drawn alike, each ``eval.per_level`` tasks a family and level: ``test``, which results report, and
``validation`` (another seed, none of test's tasks), on which settings are chosen. ``eval.split`` names the one
evaluated. A run evaluated on test keeps only test out of training (a small data set loses no more rows than
before); one evaluated on validation keeps both out, so that the settings it chooses never saw test either.

``kind`` says what the held-out accuracy measures; summaries, metrics rows and reports carry it:
- ``held_out``: tasks no training source draws;
- ``test_time``: TTRL (``curriculum.name=test_time``) trains on these prompts on purpose, never their answers;
- ``self_play``: a game has a handful of deals, and self-play (``generate.mode=selfplay``) plays them all.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from autotelic.config import ConfigError, RunConfig
from autotelic.tasks import get_family, task_uid
from autotelic.tasks.files import use_columns
from autotelic.types import Task

HeldOutKind = Literal["held_out", "test_time", "self_play"]
Split = Literal["test", "validation"]
LABELS: dict[str, str] = {
    "held_out": "held-out",
    "test_time": "test-time (trained on the evaluation prompts, TTRL)",
    "self_play": "self-play games (training plays the same deals)",
}
DRAWS_PER_SLOT = 20
PROBE_DRAWS = 200  # as many draws as the bandit tries for one task before giving up on an arm


def normalise(prompt: str) -> str:
    """A prompt up to case and whitespace: "What is 3+4?" and "what is 3 + 4 ?" are one question."""
    return "".join(prompt.casefold().split())


def heldout_tasks(families: list[str], levels: list[int], per_level: int, seed: int | str,
                  avoid: frozenset[str] = frozenset()) -> list[Task]:
    """``per_level`` distinct tasks for every family and level, from a seed only evaluation uses, none of them
    with a uid in ``avoid`` (another split's)."""
    tasks: list[Task] = []
    for name in families:
        family = get_family(name)
        for level in levels:
            if level not in family.levels:
                continue
            rng = random.Random(f"{seed}/{name}/{level}")
            seen: dict[str, Task] = {}
            for _ in range(per_level * DRAWS_PER_SLOT):
                task = family.generate(rng, level)
                if task.uid not in avoid:
                    seen.setdefault(task.uid, task)
                if len(seen) == per_level:
                    break
            tasks.extend(seen.values())
    return tasks


def split_tasks(families: list[str], levels: list[int], per_level: int, seed: int, split: Split) -> tuple[
        list[Task], list[Task]]:
    """(the tasks evaluated, those also kept out of training): test from ``seed`` alone; or validation, from its
    own seed and none of test's tasks, with test set aside."""
    test = heldout_tasks(families, levels, per_level, seed)
    if split == "test":
        return test, []
    return heldout_tasks(families, levels, per_level, f"validation/{seed}", frozenset(t.uid for t in test)), test


@dataclass(frozen=True)
class HeldOut(Sequence[Task]):
    """The held-out tasks (a sequence of them, as evaluation reads it) and what training must leave out."""

    tasks: tuple[Task, ...]
    kind: HeldOutKind = "held_out"
    split: Split = "test"
    set_aside: tuple[Task, ...] = ()
    """Tasks kept out of training as well, never evaluated: test's, where validation is evaluated."""
    uids: frozenset[str] = field(init=False)
    prompts: frozenset[str] = field(init=False)
    """Normalised prompts of the held-out tasks their prompt alone identifies (not a guess-the-number prompt,
    the same for every secret)."""

    def __post_init__(self) -> None:
        kept_out = (*self.tasks, *self.set_aside)
        object.__setattr__(self, "uids", frozenset(t.uid for t in kept_out))
        object.__setattr__(self, "prompts", frozenset(normalise(t.prompt) for t in kept_out
                                                      if t.uid == task_uid(t.family, t.prompt)))

    def __len__(self) -> int:
        return len(self.tasks)

    @overload
    def __getitem__(self, index: int) -> Task: ...

    @overload
    def __getitem__(self, index: slice) -> list[Task]: ...

    def __getitem__(self, index: int | slice) -> Task | list[Task]:
        return list(self.tasks[index]) if isinstance(index, slice) else self.tasks[index]

    @property
    def trained_on(self) -> bool:
        """Whether training uses these tasks on purpose (TTRL, self-play): then nothing is excluded."""
        return self.kind != "held_out"

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def excludes(self, task: Task) -> bool:
        """Whether a training source must drop ``task``."""
        return not self.trained_on and (task.uid in self.uids or normalise(task.prompt) in self.prompts)

    def summary(self) -> dict[str, str | int]:
        return {"heldout_kind": self.kind, "heldout_label": self.label, "heldout_split": self.split,
                "heldout_tasks": len(self.tasks)}


def heldout_families(config: RunConfig) -> list[str]:
    """``eval.families`` (e.g. a data set's test split), or else the curriculum's own, held out by seed."""
    return config.eval.families if config.eval.families is not None else config.curriculum.families


def build_heldout(config: RunConfig) -> HeldOut:
    """The run's held-out set; a ConfigError when it leaves some trained (family, level) no task to train on."""
    cur, ev = config.curriculum, config.eval
    families = heldout_families(config)
    use_columns([*cur.families, *families], cur.columns)  # a user's data files are read through the run's columns
    kind: HeldOutKind = ("test_time" if cur.name == "test_time"
                         else "self_play" if config.generate.mode == "selfplay" else "held_out")
    evaluated, other = split_tasks(families, ev.levels, ev.per_level, ev.seed, ev.split)
    heldout = HeldOut(tuple(evaluated), kind, ev.split, tuple(other))
    if not heldout.trained_on:
        _check_room(heldout, cur.families, cur.levels, ev.per_level)
    return heldout


def _check_room(heldout: HeldOut, families: list[str], levels: list[int], per_level: int) -> None:
    """Fail before any model loads, rather than when the curriculum first draws the exhausted arm."""
    for name in families:
        family = get_family(name)
        for level in (level for level in levels if level in family.levels):
            rng = random.Random(f"probe/{name}/{level}")
            if all(heldout.excludes(family.generate(rng, level)) for _ in range(PROBE_DRAWS)):
                held = sum(t.family == name and t.level == level for t in (*heldout.tasks, *heldout.set_aside))
                raise ConfigError(f"eval.per_level={per_level} holds out every task of family '{name}' level {level} "
                                  f"({held} distinct, over both splits with eval.split=validation), leaving none to "
                                  f"train on: lower eval.per_level or drop level {level} from eval.levels")
