"""textarena's two-player games: ``TextArenaGame``, one game with per-player views, and the ta_* task families
dealt from it, played in self-play (``generate.mode=selfplay``, a transcript per player) or as one episode of
``envs.textarena_games.TextArenaSelfPlayEnv``.

``TextArenaGame`` is one game as a ``TwoPlayerGame``: ``observe(player)`` drains that player's own
textarena observation queue, so a player sees only what the game shows it (its own card, the moves as
the game announces them), never the other's private messages; ``step`` applies the current player's
move. The self-play generator (``rollout/selfplay.py``) keeps one chat transcript per player on it.
Moves are read strictly as the game's bracket format (``[4]``, ``[bet]``). textarena allows one retry
after an invalid move; a second in a row loses.

textarena seeds Python's global ``random`` in ``reset`` and deals from it during play; each game here
keeps its own generator state and swaps it in around textarena calls, so games are reproducible from
their seed and the rest of the process's randomness is left alone.

A task is a game dealt from a seed (in ``meta``); its prompt is the first player's opening view, its uid
the deal. There is no answer to check: scored single-turn, a reply earns 1 when it is a legal opening move.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from autotelic.tasks import task_uid
from autotelic.types import Move, Task

Message = tuple[int, str, Any]  # textarena's (sender id, text, observation type)


def format_messages(messages: list[Message]) -> str:
    """Game messages as text; the players' own move texts are left out (the game announces each move)."""
    from textarena import GAME_ID

    return "\n".join(text.strip() for sender, text, _ in messages if sender == GAME_ID)


def turn_view(player: int, messages: list[Message]) -> str:
    """``messages`` as the self-play transcript shows them to ``player``, headed by whose turn it is."""
    return f"Player {player}'s turn.\n{format_messages(messages)}"


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
        return format_messages(self.take(player))

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



KUHN_CARDS = "JQK"


def kuhn_poker_rules(game: TextArenaGame, player: int) -> str:
    """A fixed rule player for one-round Kuhn poker, for evaluation against a player no training run met: it
    bets or calls with the king, checks and calls with the queen, checks and folds with the jack (Kuhn's
    equilibrium without its bluffs and mixed calls, so deterministic and exploitable, yet beaten only by
    play that tells the cards apart)."""
    card = KUHN_CARDS[game.game.state.game_state["player_cards"][player]]
    legal = game.game.state.game_state["current_legal_action_tree"]
    if "check" in legal:  # no bet on the table
        return "[bet]" if card == "K" else "[check]"
    return "[fold]" if card == "J" else "[call]"


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
        game = TextArenaGame()
        game.reset(task)
        prompt = turn_view(game.current_player, game.take(game.current_player))  # the self-play env's first view
        # A task is its game, not its seed: the opening view and the deal it hides (the opponent's card). Kuhn
        # poker has 6 deals and tic-tac-toe one, so no held-out game stays unplayed: self-play's held-out set
        # is labelled as played in training (``heldout.HeldOut.kind``).
        return dataclasses.replace(task, prompt=prompt, uid=task_uid(self.name, f"{prompt}#{game.deal()}"))

    def score(self, task: Task, completion: str) -> float:
        game = TextArenaGame()
        game.reset(task)
        return float(game.step(completion).valid)


TEXTARENA_FAMILIES = {family.name: family for family in (
    TextArenaFamily("ta_kuhn_poker", "KuhnPoker-v0", {"max_rounds": 1}),
    TextArenaFamily("ta_tictactoe", "TicTacToe-v0"),
)}
