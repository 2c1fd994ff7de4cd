"""Two-player textarena games for self-play: ``TextArenaGame`` (per-player views) and ``TextArenaSelfPlayEnv``.

``TextArenaGame`` is one game as a ``TwoPlayerGame``: ``observe(player)`` drains that player's own
textarena observation queue, so a player sees only what the game shows it (its own card, the moves as
the game announces them), never the other's private messages; ``step`` applies the current player's
move. The self-play generator (``rollout/selfplay.py``) keeps one chat transcript per player on it.

``TextArenaSelfPlayEnv`` is the same game as a single ``Environment`` for episode mode: one transcript
whose turns alternate between the players. ``step`` applies the current player's move and returns the
next player's view (the game's new messages to that player, headed by whose turn it is). The reward of
a step is the final game reward of the player who moved (+1 win, -1 loss, 0 draw), paid on the move that
ends the game; ``info["player"]`` says who that was and the last step's ``info["rewards"]`` holds both
players'. Caveat: one transcript holds both players' views, so in a hidden-information game (Kuhn
poker) each role can read the other's card earlier in its context; ``generate.mode=selfplay`` does not.

Moves are read strictly as the game's bracket format (``[4]``, ``[bet]``). textarena allows one retry
after an invalid move; a second in a row loses.

textarena seeds Python's global ``random`` in ``reset`` and deals from it during play; each game here
keeps its own generator state and swaps it in around textarena calls, so games are reproducible from
their seed and the rest of the process's randomness is left alone.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from autotelic.envs import Move, Step
from autotelic.envs.registry import EnvironmentSpec
from autotelic.types import Task

Message = tuple[int, str, Any]  # textarena's (sender id, text, observation type)


def _format(messages: list[Message]) -> str:
    """Game messages as text; the players' own move texts are left out (the game announces each move)."""
    from textarena import GAME_ID

    return "\n".join(text.strip() for sender, text, _ in messages if sender == GAME_ID)


class TextArenaGame:
    """A textarena two-player game from ``task.meta``: ``env_id`` (e.g. "TicTacToe-v0"), ``seed`` and
    optional ``env_kwargs`` for the game's constructor."""

    def __init__(self) -> None:
        self.game: Any = None
        self._random_state: tuple[Any, ...] | None = None

    @contextmanager
    def _own_random(self) -> Iterator[None]:
        outer = random.getstate()
        if self._random_state is not None:
            random.setstate(self._random_state)
        try:
            yield
        finally:
            self._random_state = random.getstate()
            random.setstate(outer)

    def reset(self, task: Task) -> None:
        self._random_state = None
        with self._own_random():  # importing textarena draws from the global generator too
            import textarena

            # the "-raw" registration is the bare game, without textarena's LLM observation/action wrappers
            self.game = textarena.make(f"{task.meta['env_id']}-raw", **task.meta.get("env_kwargs", {}))
            self.game.reset(num_players=2, seed=task.meta["seed"])

    @property
    def current_player(self) -> int:
        return self.game.state.current_player_id

    def deal(self) -> str:
        """The game's state as text (the cards dealt, the board): before any move, with the opening view, what
        tells one game from another (many seeds deal alike)."""
        return json.dumps(self.game.state.game_state, sort_keys=True, default=str)

    def take(self, player: int) -> list[Message]:
        """The messages queued for ``player`` since it last looked, removed from its queue."""
        queues = self.game.state.observations
        messages, queues[player] = queues[player], []
        return messages

    def observe(self, player: int) -> str:
        return _format(self.take(player))

    def step(self, action: str) -> Move:
        if self.game is None:
            raise RuntimeError("step() before reset()")
        state = self.game.state
        if state.done:
            raise RuntimeError("step() after the game ended")
        player, turn = self.current_player, state.turn
        with self._own_random():
            done, _ = self.game.step(action)
        # an accepted move advances the turn count; a rejected one is retried or, if repeated, loses
        valid = state.turn > turn and not state.game_info[player]["invalid_move"]
        if not done:
            return Move(player, valid, False, None, "")
        rewards = {pid: float(r) for pid, r in state.rewards.items()}
        return Move(player, valid, True, rewards, state.game_info[player].get("reason", ""))


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
        return f"Player {player}'s turn.\n{_format(shown)}"

    def step(self, action: str) -> Step:
        move = self.game.step(action)
        if not move.done:
            return Step(self._observe(), 0.0, False, {"player": move.player, "valid": move.valid})
        return Step(f"Game over. {move.reason}".strip(), move.rewards[move.player], True,
                    {"player": move.player, "valid": move.valid, "rewards": move.rewards})


def load_environment() -> EnvironmentSpec:
    """Self-play transcripts over the ta_* families (``curriculum.families`` names the games)."""
    return EnvironmentSpec(TextArenaSelfPlayEnv)
