"""Task families for textarena's two-player games, played in self-play (``generate.mode=selfplay``, a
transcript per player, or as one episode of ``envs.textarena_games.TextArenaSelfPlayEnv``).

A task is a game and its seed (in ``meta``); its prompt is the first player's opening view. There is no
answer to check: scored single-turn, a reply earns 1 when it is a legal opening move.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from autotelic.envs.textarena_games import TextArenaSelfPlayEnv
from autotelic.tasks import task_uid
from autotelic.types import Task


@dataclass(frozen=True)
class TextArenaFamily:
    name: str
    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    levels: tuple[int, ...] = (1,)

    def generate(self, rng: random.Random, level: int) -> Task:
        if level not in self.levels:
            raise ValueError(f"family '{self.name}' has levels {self.levels}, not {level}")
        seed = rng.randrange(2**31)
        task = Task("", "", self.name, level, "",
                    meta={"env_id": self.env_id, "seed": seed, "env_kwargs": dict(self.env_kwargs)})
        prompt = TextArenaSelfPlayEnv().reset(task)
        # The opening view hides the opponent's card, so the seed is part of the task's identity. A game
        # without chance (tic-tac-toe) is the same for every seed, but one uid per seed keeps a held-out
        # set from exhausting the family's task space.
        return dataclasses.replace(task, prompt=prompt, uid=task_uid(self.name, f"{prompt}#{seed}"))

    def score(self, task: Task, completion: str) -> float:
        env = TextArenaSelfPlayEnv()
        env.reset(task)
        return float(env.step(completion).info["valid"])


TEXTARENA_FAMILIES = {family.name: family for family in (
    TextArenaFamily("ta_kuhn_poker", "KuhnPoker-v0", {"max_rounds": 1}),
    TextArenaFamily("ta_tictactoe", "TicTacToe-v0"),
)}
