"""``selfplay``: two-player games (SPIRAL-style) where the policy plays both seats, or one against a frozen
copy of itself (``selfplay.opponent=frozen``); each seat's transcript is its own sample."""

from __future__ import annotations

from autotelic.algorithms import AlgorithmSpec
from autotelic.backends.hf import HFPolicy
from autotelic.config import RunConfig
from autotelic.envs import make_game_factory
from autotelic.modes.registry import Built, Mode, needs_env, refuse_early_exit, refuse_question_notes, register_mode
from autotelic.rollout.selfplay import SelfPlaySampler


def games(built: Built) -> SelfPlaySampler:
    config = built.config
    gen = config.generate
    frozen = config.selfplay.opponent == "frozen"
    opponent = HFPolicy(config.model, seed=config.train.seed) if frozen else None  # never updated
    return SelfPlaySampler(built.policy, make_game_factory(gen.env), gen.temperature, gen.top_p,
                           config.episode.max_turns, opponent)


def problems(config: RunConfig, spec: AlgorithmSpec) -> list[str]:
    return refuse_early_exit(config) + needs_env(config, "textarena") + refuse_question_notes(config)


register_mode(Mode("selfplay", games, problems, games=True))
