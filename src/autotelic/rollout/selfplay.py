"""Self-play in two-player zero-sum games, a transcript per player (SPIRAL, Liu et al. 2025).

One policy plays both roles of every game. Each player has its own chat: its views of the game
(``TwoPlayerGame.observe``: only what the game shows that player, e.g. its own card and the moves as
announced) as user messages, its own moves as assistant turns. Each game gives one sample per player:
its moves trained (mask 1), the views between them masked (mask 0, log-prob 0), and ``info["return"]``
its final game reward (+1 win, -1 loss, 0 draw) for the ``env`` reward; ``info["player"]``,
``info["turns"]`` and ``info["invalid_actions"]`` are its own.

The two roles start from different views, so a task (a game and its seed) gives one group per role, of
``size`` games each: uid suffixed ``/p<role>``, ``prompt`` the role's view before any move. The group's
``prompt_ids`` are the longest token prefix its players' first chat prompts share; the rest of each
first prompt (what the second player saw of the first player's opening) starts the sample, masked. A
group-relative baseline then compares plays of one role in one deal; ``algorithm.name=spiral`` instead
baselines each role by its rewards across steps (RAE).

Each round is one batched policy call over every running game, for whichever player is to move in it.
``info["end"]`` says how a game ended: ``game`` (by its own rules, textarena's one retry after an invalid
move included), ``token_cap`` (the player to move had no room left under ``max_new_tokens`` for its tokens
after its first prompt, its last move cut or its view filling the rest: it loses, as SPIRAL scores a
truncated reply, so rambling never saves a seat from losing) or ``max_turns`` (moves of both players,
retries included, ran out: a draw).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotelic.backends import Completion, PolicyBackend, PrefixCache
from autotelic.envs import TwoPlayerGame
from autotelic.rollout.generate import (
    add_observation,
    add_turn,
    common_prefix,
    episode_sample,
    next_turns,
    set_own_text,
    sizes_per_task,
    under_shared_prompt,
)
from autotelic.types import Group, Sample, Task

ROLES = (0, 1)


@dataclass
class _Seat:
    """One player's side of a game in play."""

    sample: Sample
    intro: str  # what the game showed this player at the start, before any move
    prompt: list[int] = field(default_factory=list)  # its chat up to its first move; empty until then


@dataclass
class _Table:
    game: TwoPlayerGame
    seats: tuple[_Seat, ...]  # by player id
    learner: int = 0  # with a fixed opponent: the seat the trained policy plays
    result: tuple[dict[int, float], str, str] | None = None  # (rewards, "game" or "token_cap", the game's reason)


@dataclass
class SelfPlaySampler:
    """``size`` games per task, the policy in both seats; two groups per task (see the module docstring).

    ``opponent``: a fixed (never trained) player instead of the policy itself, SPIRAL's fixed-opponent
    baseline; or ``rules``: a scripted one, the move it makes for a player in a game (e.g.
    ``tasks.textarena_games.kuhn_poker_rules``), to evaluate against a player no arm trained with. The policy
    then takes seat 0 in even games and seat 1 in odd ones, and only its seats form groups.
    """

    policy: PolicyBackend
    make_game: Callable[[], TwoPlayerGame]
    temperature: float = 1.0
    top_p: float = 1.0
    max_turns: int = 8
    opponent: PolicyBackend | None = None
    rules: Callable[[Any, int], str] | None = None

    def __post_init__(self) -> None:
        if self.opponent is not None and self.rules is not None:
            raise ValueError("SelfPlaySampler takes one fixed opponent: a policy (opponent) or rules, not both")

    @property
    def _fixed(self) -> bool:
        return self.opponent is not None or self.rules is not None

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        games = [[self._table(task, learner=i % 2) for i in range(size)]
                 for task, size in zip(tasks, sizes_per_task(sizes, len(tasks)))]
        self._play([table for tables in games for table in tables], max_new_tokens)
        groups = []
        for task, tables in zip(tasks, games):
            for role in ROLES:
                seats = [table.seats[role] for table in tables if not self._fixed or table.learner == role]
                if seats:
                    groups.append(self._group(task, role, seats))
        return groups

    def _table(self, task: Task, learner: int) -> _Table:
        game = self.make_game()
        game.reset(task)
        seats = tuple(_Seat(episode_sample(self.policy, player=role), game.observe(role)) for role in ROLES)
        return _Table(game, seats, learner)

    def _player(self, table: _Table, role: int) -> PolicyBackend | None:
        """Who moves for ``role``: the policy, the fixed opponent policy, or None for the rules."""
        return self.policy if not self._fixed or role == table.learner else self.opponent

    def _moves(self, movers: list[tuple[_Table, _Seat]], max_new_tokens: int,
               prefixes: dict[int, PrefixCache]) -> list[Completion]:
        """Each mover's next move: one batched call per player (the policy, and the fixed opponent if any, each
        with its own ``prefixes``); the rules' moves as the tokens the policy would have written for them."""
        moves: list[Completion | None] = [None] * len(movers)
        for backend in [self.policy] + ([self.opponent] if self.opponent is not None else []):
            mine = [i for i, (table, seat) in enumerate(movers)
                    if self._player(table, seat.sample.info["player"]) is backend]
            if mine:
                contexts = [(movers[i][1].prompt, movers[i][1].sample) for i in mine]
                for i, move in zip(mine, next_turns(backend, contexts, max_new_tokens, self.temperature, self.top_p,
                                                    prefixes=prefixes.setdefault(id(backend), PrefixCache()))):
                    moves[i] = move
        if self.rules is not None:
            for i, (table, seat) in enumerate(movers):
                if self._player(table, seat.sample.info["player"]) is None:
                    ids = self.policy.encode_completion(self.rules(table.game, seat.sample.info["player"]))
                    moves[i] = Completion(ids, [0.0] * len(ids), finished=True)
        return moves

    def _show(self, seat: _Seat, news: str) -> None:
        """The player's view at its turn: its first chat prompt, then a masked user message per turn."""
        if seat.prompt:
            view = news
            add_observation(self.policy, seat.sample, view)
        else:
            view = "\n".join(text for text in (seat.intro, news) if text)
            seat.prompt = self.policy.encode_prompt(view)
        seat.sample.info["observations"].append(view)

    def _play(self, tables: list[_Table], max_new_tokens: int) -> None:
        running, prefixes = tables, {}  # each player's transcripts' state between its moves, per model
        for _ in range(self.max_turns):
            movers = []
            for table in running:
                player = table.game.current_player
                seat = table.seats[player]
                if seat.sample.finished:  # its last move ended before the cap: it sees what happened since
                    self._show(seat, table.game.observe(player))
                if seat.sample.finished and len(seat.sample.token_ids) < max_new_tokens:
                    movers.append((table, seat))
                else:  # no room left for its move: it loses, as SPIRAL scores a truncated reply
                    seat.sample.finished = False
                    table.result = {player: -1.0, 1 - player: 1.0}, "token_cap", ""
            if not movers:
                break
            completions = self._moves(movers, max_new_tokens, prefixes)
            running = []
            for (table, seat), completion in zip(movers, completions):
                move = table.game.step(self.policy.decode(add_turn(seat.sample, completion, max_new_tokens)))
                seat.sample.info["invalid_actions"] += int(not move.valid)
                if move.done:
                    table.result = move.rewards, "game", move.reason
                else:
                    running.append(table)
        for table in tables:
            rewards, end, reason = table.result or ({role: 0.0 for role in ROLES}, "max_turns", "")
            for role, seat in enumerate(table.seats):
                seat.sample.info.update({"return": rewards[role], "end": end})
                if reason:
                    seat.sample.info["observations"].append(reason)
                set_own_text(self.policy, seat.sample)

    def _group(self, task: Task, role: int, seats: list[_Seat]) -> Group:
        """One role's samples of a task's games, under the longest prompt their first views share."""
        first_prompts = [seat.prompt for seat in seats if seat.prompt]  # a player may never have moved
        shared = common_prefix(first_prompts or [self.policy.encode_prompt(seats[0].intro)])
        for seat in seats:
            under_shared_prompt(seat.sample, seat.prompt, shared)
        role_task = dataclasses.replace(task, prompt=seats[0].intro, uid=f"{task.uid}/p{role}",
                                        meta={**task.meta, "player": role})
        return Group(role_task, shared, [seat.sample for seat in seats])
