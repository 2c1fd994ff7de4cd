"""``episode``: multi-turn episodes in an environment (tools, text games, web pages), observation tokens masked
out of the loss; held-out tasks are played as whole greedy episodes, by the policy alone or by the operator
agent (``eval.agent=operator``: reflector, planner, grounder and summarizer roles, OpAgent-style)."""

from __future__ import annotations

from autotelic.algorithms import AlgorithmSpec
from autotelic.backends import PolicyBackend
from autotelic.backends.hf import role_backend
from autotelic.config import RunConfig
from autotelic.modes.environments import env_factory, run_env_factory
from autotelic.modes.registry import Built, Mode, needs_env, register_mode
from autotelic.rollout.episode_tree import EpisodeTree
from autotelic.rollout.generate import EpisodeSampler, RolloutWorker
from autotelic.rollout.operator import ROLES, OperatorAgent


def episodes(built: Built) -> EpisodeSampler:
    config = built.config
    gen, episode = config.generate, config.episode
    tree = EpisodeTree(episode.tree_roots, tuple(episode.branch_turns)) if episode.tree_roots else None
    return EpisodeSampler(built.policy, env_factory(config, gen.env, gen.env_args), gen.temperature, gen.top_p,
                          episode.max_turns, turn_tokens=episode.turn_tokens, max_invalid=episode.max_invalid,
                          tree=tree)


def heldout_agent(config: RunConfig, policy: PolicyBackend, temperature: float | None = None) -> RolloutWorker:
    """Held-out episodes: the policy alone, greedy (or sampled at ``temperature``, for pass@k), or the operator
    agent (``eval.agent``, greedy)."""
    if config.eval.agent == "operator":
        return operator(config, policy)
    episode = config.episode
    return EpisodeSampler(policy, run_env_factory(config), temperature or 1.0, max_turns=episode.max_turns,
                          greedy=temperature is None, turn_tokens=episode.turn_tokens, max_invalid=episode.max_invalid)


def operator(config: RunConfig, policy: PolicyBackend) -> OperatorAgent:
    """Each role played by the policy, a fresh never-trained copy of the initial model (``base``) or a model
    directory; roles naming the same model share it."""
    cfg, models = config.operator, {}
    roles = {role: role_backend(getattr(cfg, role), policy, config.model, config.train.seed, models) for role in ROLES}
    return OperatorAgent(roles, run_env_factory(config), config.episode.max_turns, cfg.plan_tokens,
                         cfg.action_tokens, cfg.note_tokens, cfg.keep_recent)


def problems(config: RunConfig, spec: AlgorithmSpec) -> list[str]:
    roots, size = config.episode.tree_roots, config.generate.group_size
    tree = ([f"episode.tree_roots={roots} starts as many episodes as generate.group_size={size} holds, so the tree "
             f"would copy none: set it below {size}, or 0 for no tree"] if roots >= size else [])
    return needs_env(config, "guess_number") + tree


register_mode(Mode("episode", episodes, problems, holds_envs=lambda config: True, heldout_agent=heldout_agent))
