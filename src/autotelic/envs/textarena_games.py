"""The self-play environment over textarena's two-player games (``tasks/textarena_games.py``).

``TextArenaSelfPlayEnv`` is a ``TextArenaGame`` as a single ``Environment`` for episode mode: one transcript
whose turns alternate between the players. ``step`` applies the current player's move and returns the
next player's view (the game's new messages to that player, headed by whose turn it is). The reward of
a step is the final game reward of the player who moved (+1 win, -1 loss, 0 draw), paid on the move that
ends the game; ``info["player"]`` says who that was and the last step's ``info["rewards"]`` holds both
players'. Caveat: one transcript holds both players' views, so in a hidden-information game (Kuhn
poker) each role can read the other's card earlier in its context; ``generate.mode=selfplay`` does not.
"""

from __future__ import annotations

from autotelic.envs import Step
from autotelic.envs.registry import EnvironmentSpec
from autotelic.tasks.textarena_games import Message, TextArenaGame, turn_view
from autotelic.types import Task


class TextArenaSelfPlayEnv:
    """A ``TextArenaGame`` as one transcript (see the module docstring)."""

    def __init__(self) -> None:
        self.game = TextArenaGame()
        self._held: dict[int, list[Message]] = {}

    def reset(self, task: Task) -> str:
        self.game.reset(task)
        self._held = {0: [], 1: []}
        return self._observe()

    @property
    def current_player(self) -> int:
        return self.game.current_player

    def _observe(self) -> str:
        """What the transcript has not shown yet, for the player to move.

        textarena queues every broadcast for both players; the transcript shows it once. Both queues are
        drained at each turn: the mover's is new, and the waiting player's private messages (its prompt,
        its card) are held until its own turn."""
        player = self.current_player
        mine, theirs = self.game.take(player), self.game.take(1 - player)
        self._held[1 - player] += [message for message in theirs if message not in mine]
        shown, self._held[player] = self._held[player] + mine, []
        return turn_view(player, shown)

    def step(self, action: str) -> Step:
        move = self.game.step(action)
        if not move.done:
            return Step(self._observe(), 0.0, False, {"player": move.player, "valid": move.valid})
        return Step(f"Game over. {move.reason}".strip(), move.rewards[move.player], True,
                    {"player": move.player, "valid": move.valid, "rewards": move.rewards})

    def close(self) -> None:  # holds nothing to release
        pass


def load_environment() -> EnvironmentSpec:
    """Self-play transcripts over the ta_* families (``curriculum.families`` names the games)."""
    return EnvironmentSpec(TextArenaSelfPlayEnv)
