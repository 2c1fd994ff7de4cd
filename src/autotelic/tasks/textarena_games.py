"""Task families for textarena's two-player games, played in self-play (``generate.mode=selfplay``, a
transcript per player, or as one episode of ``envs.textarena_games.TextArenaSelfPlayEnv``).

A task is a game dealt from a seed (in ``meta``); its prompt is the first player's opening view, its uid
the deal. There is no
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
        env = TextArenaSelfPlayEnv()
        prompt = env.reset(task)
        # A task is its game, not its seed: the opening view and the deal it hides (the opponent's card). Kuhn
        # poker has 6 deals and tic-tac-toe one, so no held-out game stays unplayed: self-play's held-out set
        # is labelled as played in training (``heldout.HeldOut.kind``).
        return dataclasses.replace(task, prompt=prompt, uid=task_uid(self.name, f"{prompt}#{env.game.deal()}"))

    def score(self, task: Task, completion: str) -> float:
        env = TextArenaSelfPlayEnv()
        env.reset(task)
        return float(env.step(completion).info["valid"])


TEXTARENA_FAMILIES = {family.name: family for family in (
    TextArenaFamily("ta_kuhn_poker", "KuhnPoker-v0", {"max_rounds": 1}),
    TextArenaFamily("ta_tictactoe", "TicTacToe-v0"),
)}
