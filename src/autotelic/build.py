"""Building a run's parts from its config: the curriculum, the Generate/Filter/Control/Replay stages of the
rollout pipeline, the rewards, the mode's generator (in this process or on Ray actors) and the FSDP train group.
Only this module and the trainer know every part; each builder takes the config and what it is built around.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import torch

from autotelic.abilities import Learns
from autotelic.algorithms import AlgorithmSpec
from autotelic.backends import DecoderStops, PolicyBackend
from autotelic.backends.hf import HFPolicy, role_backend
from autotelic.backends.vllm import build_vllm_generation_policy
from autotelic.checks import TrainingError, check_run, sandbox_isolation
from autotelic.config import RunConfig
from autotelic.curricula import BanditCurriculum, Curriculum, PrefixCurriculum, PromptPoolCurriculum
from autotelic.curricula.base import find_layer
from autotelic.curricula.evolve import EvolvingPromptPool, PromptEvolver
from autotelic.curricula.failures import FailureCurriculum
from autotelic.curricula.hints import HintCurriculum
from autotelic.curricula.memory import MemoryCurriculum
from autotelic.heldout import DRAWS_PER_SLOT, HeldOut, build_heldout
from autotelic.modes import Built, get_mode
from autotelic.modes.environments import run_env_factory
from autotelic.rewards import JUDGE_MODEL, JUDGES, build_reward
from autotelic.rollout.control import Budget
from autotelic.rollout.filter import (
    GroupFilter,
    MinStdFilter,
    PassRateBand,
    RewardErrors,
    Scorer,
    ZeroVarianceFilter,
    completion_scorer,
    env_return,
    weighted_scorer,
)
from autotelic.rollout.generate import RolloutWorker
from autotelic.rollout.pipeline import RolloutPipeline
from autotelic.rollout.replay import OnPolicyBuffer, ReplayBuffer
from autotelic.sandbox import configure as configure_sandbox
from autotelic.turn_credit import turn_credit_of
from autotelic.types import Task
from autotelic.update import SideLearner, load_pairs

if TYPE_CHECKING:  # the FSDP group (and torch.distributed) load only when dist.train_workers asks
    from autotelic.dist.fsdp import FSDPTrainGroup


@dataclass(frozen=True)
class RunPlan:
    """What a run builds from its config before any model loads: everything wrong with the config that can be
    known without a model stops here (``autotelic config --check`` builds it and nothing more)."""

    spec: AlgorithmSpec
    isolation: str | None
    """The sandbox isolation model-written code runs under; None: the run runs none."""
    heldout: HeldOut
    curriculum: Curriculum
    pairs: list[dict[str, str]] | None
    """Offline DPO's preference pairs."""


def plan_run(config: RunConfig) -> RunPlan:
    spec = check_run(config)
    isolation = sandbox_isolation(config)  # before the model loads: no isolation, no run
    random.seed(config.train.seed)
    torch.manual_seed(config.train.seed)
    heldout = build_heldout(config)
    return RunPlan(spec, isolation, heldout, build_curriculum(config, heldout),
                   load_pairs(config.algorithm.dataset) if spec.name == "offline_dpo" else None)


def distinct_tasks(source: BanditCurriculum, count: int) -> list[Task]:
    """Up to ``count`` different tasks: a pool drawn with repeats would hold fewer prompts than it was given room
    for, and a small data set repeats rows often."""
    found: dict[str, Task] = {}
    for _ in range(DRAWS_PER_SLOT):
        for task in source.next_tasks(count - len(found)):
            found.setdefault(task.uid, task)
        if len(found) >= count:
            break
    return list(found.values())


def build_curriculum(config: RunConfig, heldout: HeldOut) -> Curriculum:
    cur, seed = config.curriculum, config.train.seed
    if cur.name == "test_time":  # TTRL: adapt on the evaluation prompts (heldout.kind says so), without their labels
        return PromptPoolCurriculum(list(heldout.tasks), heldout, seed=seed, metric=cur.metric)
    bandit = BanditCurriculum(cur.families, cur.levels, seed=seed, heldout=heldout,
                              value="learnability" if cur.name == "regret" else cur.name,
                              temperature=cur.temperature, ema=cur.ema, alpha=cur.ema,
                              prior_pass_rate=cur.prior_pass_rate, decay=cur.decay)
    curriculum: Curriculum = bandit
    if cur.name == "regret":  # eva: a pool of concrete prompts drawn from the families once, then by informativeness
        gate = tuple(cur.gate) if cur.gate is not None else None
        curriculum = PromptPoolCurriculum(distinct_tasks(bandit, cur.pool_size), heldout, seed=seed,
                                          metric=cur.metric, gate=gate)
        if cur.evolve.every:
            evolve = cur.evolve
            curriculum = EvolvingPromptPool(curriculum, evolve.every, evolve.fraction, evolve.old_fraction, seed)
    if cur.prefixes.fraction > 0 or cur.prefixes.iteration_steps:
        prefixes = cur.prefixes
        curriculum = PrefixCurriculum(curriculum, prefixes.fraction, prefixes.per_line, prefixes.decay,
                                      prefixes.min_reward, prefixes.min_std, seed=seed,
                                      iteration_steps=prefixes.iteration_steps)
    if cur.hints.fraction > 0:
        hints = cur.hints
        curriculum = HintCurriculum(curriculum, hints.column, hints.fraction, hints.share, hints.decay,
                                    hints.max_reward, hints.mode, hints.stuck_window)
    if cur.memory.fraction > 0 or cur.memory.at_eval:
        memory = cur.memory
        curriculum = MemoryCurriculum(curriculum, memory.fraction, memory.examples, memory.min_reward,
                                      memory.capacity, memory.max_chars, seed=seed)
    if cur.failure_fraction > 0:
        curriculum = FailureCurriculum(curriculum, heldout, cur.failure_fraction)
    return curriculum


def _decoder_stops(config: RunConfig) -> DecoderStops:
    return DecoderStops(config.control.stop_repeats, config.control.stop_pattern)


def _trained_model(config: RunConfig, path: str | None, seed: int, stops: DecoderStops = DecoderStops(),
                   lr: float | None = None) -> HFPolicy:
    """A model that trains with the run's optimizer settings: the model settings at ``path`` (None: model.path),
    at learning rate ``lr`` (None: algorithm.lr)."""
    algo = config.algorithm
    return HFPolicy(config.model if path is None else replace(config.model, path=path),
                    lr=algo.lr if lr is None else lr,
                    weight_decay=algo.weight_decay, max_grad_norm=algo.max_grad_norm, seed=seed,
                    stops=stops)


def build_agents(config: RunConfig) -> list[HFPolicy]:
    """The models that train: the policy, and in CoMAS's discussions one more per agent (seeded apart, each on
    the model and at the learning rate the mode names for it, ``model.path`` and ``algorithm.lr`` by default)."""
    mode = get_mode(config.generate.mode)
    return [_trained_model(config, mode.agent_model(config, index), config.train.seed + index,
                           _decoder_stops(config), mode.agent_lr(config, index))
            for index in range(mode.agents(config))]


def build_generation(config: RunConfig, policy: HFPolicy) -> PolicyBackend:
    """What samples the driver's rollouts: the policy itself, or a vLLM engine on its weights."""
    in_process_vllm = config.vllm.enabled and not config.dist.rollout_workers
    return build_vllm_generation_policy(config.vllm, policy) if in_process_vllm else policy


def build_evolver(config: RunConfig, policy: PolicyBackend,
                  spec: AlgorithmSpec) -> tuple[PromptEvolver, Learns | None]:
    """eva's evolver, and with ``curriculum.evolve.train`` the learner that trains it (its own copy of its model)."""
    evolve = config.curriculum.evolve
    if evolve.train:  # seeded apart from the agents
        backend = _trained_model(config, None if evolve.model == "base" else evolve.model, config.train.seed + 1000)
        creator = SideLearner(backend, spec, config.algorithm, evolve.temperature, evolve.max_new_tokens)
    else:
        backend, creator = role_backend(evolve.model, policy, config.model, config.train.seed, {}), None
    evolver = PromptEvolver(backend, list(evolve.operations), evolve.variants, evolve.temperature,
                            evolve.max_new_tokens, grouped=evolve.train)
    return evolver, creator


def build_scorer(config: RunConfig, policy: PolicyBackend | None) -> Scorer:
    """``policy``: the trained model, for rewards that run it (None in reward workers, which never get those)."""
    if config.dist.reward_workers:
        from autotelic.dist.actors import connect
        from autotelic.dist.rewards import RayRewardPool

        connect(config.dist)
        return RayRewardPool(partial(build_reward_worker, config), config.dist.reward_workers,
                             config.dist.cpus_per_worker, config.dist.gpus_per_worker)
    parts: list[tuple[Scorer, float]] = []
    judges: dict[str, PolicyBackend] = {}
    for spec in config.filter.rewards:
        if spec.name == "env":
            parts.append((env_return, spec.weight))
            continue
        options = dict(spec.options)
        backend = policy if spec.name == "self_certainty" else None  # confidence of the policy being trained
        if spec.name in JUDGES:  # a frozen copy of the starting model by default, the policy, or another model
            model = options.pop("model", JUDGE_MODEL)
            backend = role_backend(model, policy, config.model, config.train.seed, judges)
        try:
            reward = build_reward(spec.name, options, backend=backend)
        except ValueError as error:
            raise TrainingError(f"filter.rewards: {error}") from None
        parts.append((reward if getattr(reward, "reads_trajectories", False) else completion_scorer(reward),
                      spec.weight))
    return weighted_scorer(parts)


def build_filters(config: RunConfig) -> list[GroupFilter]:
    """The mode's own filters (they name a group's reason first), then the run's."""
    cfg = config.filter
    filters = [*get_mode(config.generate.mode).filters(config)]
    if cfg.drop_zero_variance:
        filters.append(ZeroVarianceFilter(turn_credit_of(config.algorithm)))
    if cfg.min_reward_std > 0:
        filters.append(MinStdFilter(cfg.min_reward_std))
    if cfg.pass_rate_band is not None:
        filters.append(PassRateBand(*cfg.pass_rate_band))
    return filters


def _worker_config(config: RunConfig) -> RunConfig:
    """The config a Ray actor builds its part from: no actors of its own, and (unless model.threads says
    otherwise) torch on the CPUs Ray reserved for the actor, not on every core."""
    from autotelic.dist.actors import actor_threads

    threads = actor_threads(config.model.threads, config.dist.cpus_per_worker)
    if config.generate.env is not None:  # its task family joins get_family's names in this process too
        run_env_factory(config)
    return replace(config, model=replace(config.model, threads=threads),
                   dist=replace(config.dist, rollout_workers=0, reward_workers=0))


def build_reward_worker(config: RunConfig, index: int) -> Scorer:
    """What a Ray reward actor holds: the run's scorer (with its own judge models and sandboxes)."""
    configure_sandbox(config.sandbox.isolation)
    return build_scorer(_worker_config(config), policy=None)


def build_rollout_worker(config: RunConfig, index: int) -> tuple[PolicyBackend, RolloutWorker]:
    """What a Ray rollout actor holds: its own policy copy (seeded by its index) and generator."""
    config = _worker_config(config)
    configure_sandbox(config.sandbox.isolation)  # its generator may run code (a python tool, code proposals)
    policy = HFPolicy(config.model, seed=config.train.seed + 1000 * (index + 1),
                      stops=_decoder_stops(config))
    generation = build_vllm_generation_policy(config.vllm, policy) if config.vllm.enabled else policy
    return generation, build_generator(config, generation, build_heldout(config))  # the driver's, from the config


def build_generator(config: RunConfig, policy: PolicyBackend, heldout: HeldOut,
                    agents: list[PolicyBackend] | None = None,
                    ) -> RolloutWorker:
    """The mode's generator (in this process, or on ``dist.rollout_workers`` Ray actors that each build it);
    ``heldout``: what generators that write their own tasks (propose) must not train on."""
    if config.dist.rollout_workers:
        from autotelic.dist.actors import connect
        from autotelic.dist.rollout import RayRolloutPool

        connect(config.dist)
        return RayRolloutPool(partial(build_rollout_worker, config), config.dist.rollout_workers,
                              config.dist.cpus_per_worker, config.dist.gpus_per_worker)
    return get_mode(config.generate.mode).generator(Built(config, policy, heldout, agents or [policy]))


def build_train_group(config: RunConfig, spec: AlgorithmSpec) -> FSDPTrainGroup:
    from autotelic.dist.fsdp import FSDPTrainGroup

    try:
        return FSDPTrainGroup(config.model, config.algorithm, spec, config.dist, seed=config.train.seed)
    except ValueError as error:
        raise TrainingError(str(error)) from None


def build_pipeline(config: RunConfig, policy: PolicyBackend, curriculum: Curriculum, heldout: HeldOut,
                   agents: list[PolicyBackend] | None = None, generation: PolicyBackend | None = None,
                   ) -> RolloutPipeline:
    """``generation``: what samples rollouts when it is not ``policy`` itself (a vLLM engine on its weights)."""
    control, cfg = config.control, config.filter
    replay = (ReplayBuffer(config.replay.capacity, config.replay.max_staleness, config.replay.replay_groups,
                           config.replay.max_reuse) if config.replay.name == "buffer" else OnPolicyBuffer())
    prefixes = find_layer(curriculum, PrefixCurriculum)
    if prefixes is not None:  # ReST-GRPO cuts answers where the policy's tokens break
        prefixes.tokenize = policy.tokenize
    return RolloutPipeline(
        curriculum=curriculum, generator=build_generator(config, generation or policy, heldout, agents),
        scorer=build_scorer(config, policy),
        filters=build_filters(config),
        budget=Budget(control.tasks_per_step, config.generate.group_size, control.max_new_tokens,
                      control.max_tokens_per_step, control.max_samples_per_step),
        replay=replay, dynamic_sampling=cfg.dynamic_sampling, max_rounds=cfg.max_rounds,
        keep_top_fraction=cfg.keep_top_fraction,
        adaptive_sizes=(control.min_group_size, control.max_group_size) if control.adaptive_group_size else None,
        early_exit_probe=control.early_exit_probe, overlong=control.overlong, overlong_buffer=control.overlong_buffer,
        reward_errors=RewardErrors(cfg.on_reward_error == "drop", cfg.max_dropped_share),
    )
