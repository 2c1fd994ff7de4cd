"""``propose`` (R-Zero, Agent0, Absolute Zero): the policy proposes tasks, answers each several times, and is
paid as proposer for tasks of learnable difficulty and as executor for agreeing with the majority (or, for code
tasks, with what the sandbox computed); the executor may use a tool."""

from __future__ import annotations

from typing import get_args

from autotelic.algorithms import AlgorithmSpec
from autotelic.config import ProposeKind, RunConfig
from autotelic.modes.environments import env_factory
from autotelic.modes.registry import Built, Mode, refuse_question_notes, refuse_remote, register_mode
from autotelic.rollout.filter import GroupFilter
from autotelic.rollout.propose import ProposerReward, ProposeSampler, filters, learnability, uncertainty


def proposals(built: Built) -> ProposeSampler:
    config = built.config
    cfg, gen = config.propose, config.generate
    reward = ProposerReward(cfg.repetition_penalty, cfg.duplicate_threshold, cfg.tool_bonus, cfg.invalid_reward,
                            learnability if cfg.kind == "code" else uncertainty)
    tools = env_factory(config, cfg.executor_tools) if cfg.executor_tools else None
    return ProposeSampler(built.policy, built.heldout, cfg.answers_per_task, tuple(cfg.band), reward, cfg.phase_steps,
                          cfg.show_example, gen.temperature, gen.top_p, tools, config.episode.max_turns, cfg.kind)


def problems(config: RunConfig, spec: AlgorithmSpec) -> list[str]:
    """Settings its one proposer-executor round per step cannot honour."""
    cfg, problems = config.propose, refuse_remote(config) + refuse_question_notes(config)
    if [r.name for r in config.filter.rewards] != ["env"]:
        problems.append("generate.mode=propose pays both roles itself (in the env return): use "
                        "filter.rewards=[{name: env}]")
    if config.filter.dynamic_sampling or config.control.early_exit_probe or config.control.max_tokens_per_step:
        problems.append("generate.mode=propose runs one proposer-executor round per step: turn off "
                        "filter.dynamic_sampling, control.early_exit_probe and control.max_tokens_per_step")
    if config.generate.env is not None:
        problems.append("generate.mode=propose gives the executor a tool by propose.executor_tools, not generate.env")
    if cfg.kind not in get_args(ProposeKind):
        problems.append(f"propose.kind must be one of {', '.join(get_args(ProposeKind))}, got {cfg.kind!r}")
    if cfg.kind == "code" and cfg.executor_tools:
        problems.append("propose.kind=code asks the executor to predict what the code returns: running it with "
                        "propose.executor_tools would answer by execution; leave executor_tools unset")
    return problems


def runs_code(config: RunConfig) -> bool:
    """Code proposals are labelled by running them; a python tool runs the executor's code."""
    return config.propose.kind == "code" or config.propose.executor_tools == "python"


def group_filters(config: RunConfig) -> list[GroupFilter]:
    return list(filters(tuple(config.propose.band)))


register_mode(Mode("propose", proposals, problems, holds_envs=lambda config: bool(config.propose.executor_tools),
                   runs_code=runs_code, filters=group_filters))
