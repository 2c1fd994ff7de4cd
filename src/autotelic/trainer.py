"""The training loop. One step is data flowing through the four rollout stages:

    curriculum.next_tasks -> Generate -> Filter (rewards, group filters, dynamic sampling)
    -> Control (group sizes, early exit, overlong, token budget) -> Replay -> loss -> update

``build_pipeline`` turns the config into those stages; ``update.py`` turns a batch into the configured
algorithm's loss. Every step appends to metrics.jsonl and rollouts.jsonl and (every
``checkpoint_every`` steps) writes a checkpoint that ``autotelic resume`` continues from exactly.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import random
import shutil
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, get_args

import torch

from autotelic.algorithms import ADVANTAGE_ESTIMATORS, AlgorithmSpec, get_algorithm
from autotelic.backends import PolicyBackend
from autotelic.backends.embedded import RANDOM_PREFIX, ModelFileError
from autotelic.backends.hf import HFPolicy, model_dir_problem, read_chat_template, resolve_device
from autotelic.backends.vllm import build_vllm_generation_policy, require_vllm, vllm_problems
from autotelic.checkpoint import CheckpointWriter, load_latest
from autotelic.config import (
    ConfigError,
    ModelConfig,
    ProposeKind,
    RunConfig,
    load_config,
    missing_package,
    save_config,
    to_dict,
)
from autotelic.curricula import (
    BanditCurriculum,
    Curriculum,
    PrefixCurriculum,
    PromptPoolCurriculum,
)
from autotelic.curricula.evolve import (
    OPERATIONS,
    EvolvingPromptPool,
    PromptEvolver,
    unknown_operation,
)
from autotelic.curricula.failures import FailureCurriculum
from autotelic.envs import Environment, make_env_factory, make_game_factory
from autotelic.evaluation import (
    DECODINGS,
    Decoding,
    EvalResult,
    evaluate,
    evaluate_episodes,
)
from autotelic.heldout import DRAWS_PER_SLOT, HeldOut, build_heldout
from autotelic.report.progress import ProgressDisplay
from autotelic.report.sinks import MultiSink
from autotelic.rewards import build_reward, is_custom, reward_names
from autotelic.rewards.custom import reward_problems
from autotelic.rewards.web import web_metrics
from autotelic.rollout.asynchronous import AsyncRollouts, staleness_metrics
from autotelic.rollout.control import Budget
from autotelic.rollout.discussion import (
    LOGGED_INFO as DISCUSSION_INFO,
)
from autotelic.rollout.discussion import (
    DiscussionSampler,
    agent_of,
    discussion_metrics,
    evaluate_discussion,
)
from autotelic.rollout.filter import (
    GroupFilter,
    MinStdFilter,
    PassRateBand,
    Scorer,
    ZeroVarianceFilter,
    completion_scorer,
    env_return,
    response_scorer,
    weighted_scorer,
)
from autotelic.rollout.generate import (
    EpisodeSampler,
    PartialRolloutSampler,
    PolicySampler,
    RolloutWorker,
    TreeSampler,
)
from autotelic.rollout.operator import ROLES, OperatorAgent
from autotelic.rollout.pipeline import RolloutPipeline, StepRollouts
from autotelic.rollout.propose import (
    ProposerReward,
    ProposeSampler,
    learnability,
    proposal_metrics,
    uncertainty,
)
from autotelic.rollout.replay import OnPolicyBuffer, ReplayBuffer
from autotelic.rollout.selfplay import SelfPlaySampler
from autotelic.sandbox import check as check_sandbox
from autotelic.sandbox import configure as configure_sandbox
from autotelic.tasks.code import CODE_FAMILIES
from autotelic.tasks.files import data_family, data_problems, is_data_family
from autotelic.types import SHARE_PREFIX, Group, Task
from autotelic.update import (
    PreferencePair,
    RoleBaselines,
    dpo_update,
    load_pairs,
    policy_gradient_update,
    rollout_pairs,
)
from autotelic.vm_mcts import evaluate_decodings, train_value_model

if TYPE_CHECKING:  # the FSDP group (and torch.distributed) load only when dist.train_workers asks
    from autotelic.dist.fsdp import FSDPTrainGroup

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_FAILED_STEPS = 3
# Sample facts rollouts.jsonl records when present: a self-play seat, a proposal, a discussion turn.
LOGGED_INFO = ("player", "proposal", *DISCUSSION_INFO)
# Rewards that compare against Task.answer (or hidden tests): meaningless on prompts an LLM wrote.
LABELLED_REWARDS = {"verifier", "math_verify", "unit_tests"}
# Environments that need an optional package: (package, pip extra).
ENV_PACKAGES = {"textarena": ("textarena", "games"), "web_browser": ("playwright", "web")}
# What the steps append to: a checkpoint records each one's size, and resuming cuts them back to it.
STEP_LOGS = ("metrics.jsonl", "rollouts.jsonl", "population.jsonl")


class TrainingError(RuntimeError):
    pass


def new_run_dir(config: RunConfig) -> Path:
    name = config.logging.run_name or datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(config.logging.runs_dir) / name
    if (run_dir / "config.yaml").exists():
        raise TrainingError(f"run directory {run_dir} already holds a run: use `autotelic resume {run_dir}`")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # runs_dir is a file, read-only, ...
        raise TrainingError(f"logging.runs_dir={config.logging.runs_dir}: cannot make run directory {run_dir} "
                            f"({error.strerror}); pick a writable directory") from None
    return run_dir


@dataclass
class TrainState:
    step: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    completion_tokens: int = 0
    eval_before: dict[str, Any] | None = None
    evals: list[dict[str, Any]] = field(default_factory=list)  # {"step", "accuracy", ...} over time
    pairs_seen: int = 0  # offline DPO: position in the (shuffled, cycled) preference dataset
    discussion_before: dict[str, Any] | None = None  # CoMAS: each agent alone and their discussion, before training


# ---- building the stages from the config -------------------------------------------------------
def check_run(config: RunConfig) -> AlgorithmSpec:
    """Everything that can be known wrong before a run directory is made or a model loads, each named in one line:
    settings out of range (ConfigError), missing optional packages and model files (ConfigError), settings that
    do not work together (TrainingError)."""
    config.check()
    problems = package_problems(config) + model_problems(config) + own_problems(config)
    if problems:
        raise ConfigError("; ".join(problems))
    try:
        resolve_device(config.model.device)
    except ModelFileError as error:  # a GPU asked for where none is visible: a setting, not a model file
        raise ConfigError(str(error)) from None
    try:
        spec = get_algorithm(config.algorithm.name)
    except ValueError as error:
        raise TrainingError(str(error)) from None
    check_combination(config, spec)
    return spec


def package_problems(config: RunConfig) -> list[str]:
    """Optional packages the settings need and this machine lacks (vLLM's are ``require_vllm``'s)."""
    needs = []
    ray_setting = config.dist.ray_setting()
    if ray_setting is not None:
        needs.append((ray_setting, "ray", "dist"))
    if config.generate.env in ENV_PACKAGES:
        needs.append((f"generate.env={config.generate.env}", *ENV_PACKAGES[config.generate.env]))
    games = [family for family in config.curriculum.families if family.startswith("ta_")]
    if games:
        needs.append((f"curriculum.families entry {games[0]}", "textarena", "games"))
    logging_ = config.logging
    for flag, wanted in (("tensorboard", logging_.tensorboard), ("wandb", logging_.wandb), ("mlflow", logging_.mlflow)):
        if wanted:
            needs.append((f"logging.{flag}=true", flag, flag))
    return [problem for need in needs if (problem := missing_package(*need)) is not None]


def own_problems(config: RunConfig) -> list[str]:
    """The user's data files (read with ``curriculum.columns``) and reward functions (imported), checked here."""
    families = [*config.curriculum.families, *(config.eval.families or [])]
    return [*data_problems(families, config.curriculum.columns),
            *reward_problems([reward.name for reward in config.filter.rewards])]


def model_problems(config: RunConfig) -> list[str]:
    """Local model directories the run will load (and a chat template file), checked before any of them loads."""
    paths = {"model.path": config.model.path}
    evolve = config.curriculum.evolve
    if evolve.every and evolve.model != "policy":
        paths["curriculum.evolve.model"] = evolve.model
    if config.value.enabled:
        paths["value.base_model"] = config.value.base_model
    for index, reward in enumerate(config.filter.rewards):
        if reward.name in ("judge", "web_judge") and reward.options.get("model", "policy") != "policy":
            paths[f"filter.rewards[{index}].options.model"] = str(reward.options["model"])
    problems = [problem for key, path in paths.items() if path is not None and not path.startswith(RANDOM_PREFIX)
                if (problem := model_dir_problem(key, path)) is not None]
    if config.model.chat_template is not None:
        try:
            read_chat_template(config.model.chat_template)
        except ModelFileError as error:
            problems.append(str(error))
    return problems


def check_combination(config: RunConfig, spec: AlgorithmSpec) -> None:
    """Settings that are each valid but do not work together, named before the model loads."""
    mode, control = config.generate.mode, config.control
    problems = []
    if spec.advantage in ADVANTAGE_ESTIMATORS or spec.name == "online_dpo":  # baselines or pairs within a group
        key = "control.min_group_size" if control.adaptive_group_size else "generate.group_size"
        smallest = control.min_group_size if control.adaptive_group_size else config.generate.group_size
        if smallest < 2 and mode != "tree":  # tree groups grow by their branches
            problems.append(f"{key}={smallest} makes groups of one sample, and {spec.name} learns from the "
                            f"differences within a task's group (every advantage would be 0): set {key}=2 or more")
    if mode == "tree" and spec.advantage not in ("grpo", "dr_grpo"):
        problems.append(f"generate.mode=tree credits tree segments with group baselines: use a GRPO-family "
                        f"algorithm (grpo, dr_grpo, dapo, gspo), not {spec.name}")
    worst_group = config.generate.group_size * control.max_new_tokens  # what Budget plans a task at
    if control.max_tokens_per_step is not None and control.max_tokens_per_step < worst_group:
        problems.append(f"control.max_tokens_per_step={control.max_tokens_per_step} fits no task (generate.group_size "
                        f"x control.max_new_tokens = {worst_group} tokens at most): set it to {worst_group} or more")
    if control.early_exit_probe is not None and mode in ("tree", "partial", "selfplay"):
        problems.append(f"control.early_exit_probe works with generate.mode sample or episode, not {mode}")
    problems += async_problems(config)
    if config.dist.train_workers and mode == "discussion":
        problems.append("dist.train_workers trains one policy; generate.mode=discussion trains one per agent: "
                        "set dist.train_workers=0")
    if config.dist.env_workers and mode != "episode" and not (mode == "propose" and config.propose.executor_tools):
        problems.append(f"dist.env_workers holds the environments of generate.mode=episode (or "
                        f"propose.executor_tools); generate.mode={mode} has none")
    if config.dist.reward_workers and rewards_on_the_policy(config):
        problems.append(f"reward '{rewards_on_the_policy(config)[0]}' runs the policy being trained, which reward "
                        "workers do not hold: give the judge its own model (options.model) or set "
                        "dist.reward_workers=0")
    problems += vllm_problems(config)
    if config.vllm.enabled:  # before the model loads: name a missing package or GPU first
        require_vllm(config.vllm)
    if config.dist.rollout_workers and mode in ("partial", "propose", "discussion"):
        problems.append(f"dist.rollout_workers works with generate.mode sample, tree, episode or selfplay, not {mode} "
                        "(its generator keeps state or several models on the driver)")
    if mode in ("episode", "selfplay") and config.generate.env is None:
        example = "textarena" if mode == "selfplay" else "guess_number"
        problems.append(f"generate.mode={mode} needs generate.env (e.g. {example})")
    if config.generate.env is not None:  # an unknown name stops here, with the known ones listed
        (make_game_factory(config.generate.env) if mode == "selfplay"
         else make_env_factory(config.generate.env, config.generate.env_args))
    if config.generate.opponent != "self" and mode != "selfplay":
        problems.append(f"generate.opponent={config.generate.opponent} needs generate.mode=selfplay, not {mode}")
    labelled = [r.name for r in config.filter.rewards if r.name in LABELLED_REWARDS]
    if config.curriculum.name == "test_time" and labelled:
        problems.append(f"curriculum.name=test_time trains on the held-out prompts, so reward '{labelled[0]}' would "
                        "read their answers: use a label-free reward (majority_vote, self_certainty, judge)")
    evolve = config.curriculum.evolve
    if evolve.every:
        if config.curriculum.name != "regret":
            problems.append("curriculum.evolve.every > 0 evolves the prompt pool of curriculum.name=regret, "
                            f"not {config.curriculum.name}")
        if labelled:
            problems.append(f"evolved prompts have no reference answer, so reward '{labelled[0]}' cannot score "
                            "them: use a label-free reward (majority_vote, self_certainty, judge)")
        unknown = unknown_operation(evolve.operations)
        if unknown is not None:
            problems.append(f"unknown curriculum.evolve.operations entry '{unknown}'; valid: {', '.join(OPERATIONS)}")
    if spec.name == "offline_dpo" and config.algorithm.dataset is None:
        problems.append("algorithm.name=offline_dpo needs algorithm.dataset (a JSONL of prompt/chosen/rejected)")
    known_rewards = [*reward_names(), "env"]
    problems += [f"unknown reward '{r.name}' in filter.rewards; valid: {', '.join(known_rewards)}"
                 for r in config.filter.rewards if r.name not in known_rewards and not is_custom(r.name)]
    problems += [f"unknown decoding '{d}' in value.decodings; valid: {', '.join(DECODINGS)}"
                 for d in config.value.decodings if d not in DECODINGS]
    if mode == "propose":
        problems += propose_problems(config)
    if mode == "discussion":
        problems += discussion_problems(config, spec)
    if problems:
        raise TrainingError("; ".join(problems))


def runs_model_code(config: RunConfig) -> bool:
    """Whether the run executes model-written code: code task families (scored by their tests), the unit_tests
    reward, the python tool, code proposals, or data rows with tests."""
    gen, propose = config.generate, config.propose
    columns = config.curriculum.columns
    return (any(name in CODE_FAMILIES or is_data_family(name) and data_family(name, columns).runs_code
                for name in config.curriculum.families)
            or any(r.name == "unit_tests" for r in config.filter.rewards) or gen.env == "python"
            or gen.mode == "propose" and (propose.kind == "code" or propose.executor_tools == "python"))


def sandbox_isolation(config: RunConfig) -> str | None:
    """Sets ``sandbox.isolation`` for every sandbox of this process and returns the isolation model-written code
    runs under (None: the run runs none). Called before any model loads: without isolation a run stops here."""
    configure_sandbox(config.sandbox.isolation)
    return check_sandbox() if runs_model_code(config) else None


def rewards_on_the_policy(config: RunConfig) -> list[str]:
    """Rewards computed by the model being trained (its confidence, or the policy as its own judge)."""
    return [r.name for r in config.filter.rewards if r.name == "self_certainty"
            or r.name in ("judge", "web_judge") and r.options.get("model", "policy") == "policy"]


def async_problems(config: RunConfig) -> list[str]:
    """Asynchronous rollouts run beside the update, so nothing they do may use the model being trained."""
    if not config.dist.async_steps:
        return []
    problems = []
    if not config.dist.rollout_workers:
        problems.append("dist.async_steps needs dist.rollout_workers >= 1: rollouts collected during an update "
                        "must come from workers holding their own copy of the weights")
    on_policy = rewards_on_the_policy(config)
    if on_policy:
        problems.append(f"reward '{on_policy[0]}' runs the policy being trained, which changes under asynchronous "
                        "rollouts: give the judge its own model (options.model) or set dist.async_steps=0")
    if config.curriculum.evolve.every and config.curriculum.evolve.model == "policy":
        problems.append("curriculum.evolve.model=policy rewrites prompts with the model being trained: give the "
                        "evolver its own model or set dist.async_steps=0")
    return problems


def propose_problems(config: RunConfig) -> list[str]:
    """generate.mode=propose: settings its one proposer-executor round per step cannot honour."""
    cfg, problems = config.propose, []
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


def discussion_problems(config: RunConfig, spec: AlgorithmSpec) -> list[str]:
    """generate.mode=discussion (CoMAS): settings its grade-paid, per-agent training cannot honour."""
    problems = []
    if [r.name for r in config.filter.rewards] != ["env"]:
        problems.append("generate.mode=discussion pays every turn from the agents' grades (in the env return), "
                        "never from the answer key: use filter.rewards=[{name: env}]")
    if spec.advantage == "rae" or spec.name == "offline_dpo":
        problems.append(f"generate.mode=discussion trains each agent on its turns of this step's discussions, "
                        f"baselined within (task, round, role) groups: use another algorithm than {spec.name}")
    if config.replay.name != "on_policy" or config.control.early_exit_probe or config.curriculum.prefix_fraction:
        problems.append("generate.mode=discussion trains on whole fresh discussions: use replay.name=on_policy, "
                        "no control.early_exit_probe and no curriculum.prefix_fraction")
    if config.curriculum.name in ("learnability", "regret"):
        problems.append(f"curriculum.name={config.curriculum.name} reads rewards as pass rates, which grades are "
                        "not: use uniform or sec with generate.mode=discussion")
    return problems


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
    if cur.prefix_fraction > 0:
        curriculum = PrefixCurriculum(curriculum, cur.prefix_fraction, cur.prefix_per_solution, cur.prefix_decay,
                                      cur.prefix_min_reward, seed=seed)
    if cur.failure_fraction > 0:
        curriculum = FailureCurriculum(curriculum, heldout, cur.failure_fraction)
    return curriculum


def build_evolver(config: RunConfig, policy: HFPolicy) -> PromptEvolver:
    evolve = config.curriculum.evolve
    backend = policy if evolve.model == "policy" else HFPolicy(ModelConfig(path=evolve.model,
                                                                           threads=config.model.threads))
    return PromptEvolver(backend, list(evolve.operations), evolve.variants, evolve.temperature, evolve.max_new_tokens)


def build_scorer(config: RunConfig, policy: HFPolicy | None) -> Scorer:
    """``policy``: the trained model, for rewards that run it (None in reward workers, which never get those)."""
    if config.dist.reward_workers:
        from autotelic.dist.actors import connect
        from autotelic.dist.rewards import RayRewardPool

        connect(config.dist)
        return RayRewardPool(partial(build_reward_worker, config), config.dist.reward_workers,
                             config.dist.cpus_per_worker, config.dist.gpus_per_worker)
    parts: list[tuple[Scorer, float]] = []
    judges: dict[str, HFPolicy] = {}
    for spec in config.filter.rewards:
        if spec.name == "env":
            parts.append((env_return, spec.weight))
            continue
        options = dict(spec.options)
        backend = policy if spec.name == "self_certainty" else None  # confidence of the policy being trained
        if spec.name in ("judge", "web_judge"):  # the policy itself, or another local model as a frozen judge
            model = options.pop("model", "policy")
            if model == "policy":
                backend = policy
            else:
                backend = judges.setdefault(model, HFPolicy(ModelConfig(path=model, threads=config.model.threads)))
        try:
            reward = build_reward(spec.name, options, backend=backend)
        except ValueError as error:
            raise TrainingError(f"filter.rewards: {error}") from None
        parts.append((reward if getattr(reward, "reads_trajectories", False) else completion_scorer(reward),
                      spec.weight))
    return weighted_scorer(parts)


def build_filters(config: RunConfig) -> list[GroupFilter]:
    cfg = config.filter
    filters: list[GroupFilter] = [ZeroVarianceFilter()] if cfg.drop_zero_variance else []
    if cfg.min_reward_std > 0:
        filters.append(MinStdFilter(cfg.min_reward_std))
    if cfg.pass_rate_band is not None:
        filters.append(PassRateBand(*cfg.pass_rate_band))
    return filters


def build_discussion(config: RunConfig, agents: list[HFPolicy], greedy: bool = False) -> DiscussionSampler:
    cfg, gen = config.discussion, config.generate
    return DiscussionSampler(agents, cfg.rounds, cfg.grade_low, cfg.grade_high, cfg.unparsed_penalty,
                             cfg.grade_tokens, gen.temperature, gen.top_p, greedy)


def _worker_config(config: RunConfig) -> RunConfig:
    """The config a Ray actor builds its part from: no actors of its own, and (unless model.threads says
    otherwise) torch on the CPUs Ray reserved for the actor, not on every core."""
    from autotelic.dist.actors import actor_threads

    threads = actor_threads(config.model.threads, config.dist.cpus_per_worker)
    if config.generate.env is not None:  # its task family joins get_family's names in this process too
        make_env_factory(config.generate.env, config.generate.env_args)
    return replace(config, model=replace(config.model, threads=threads),
                   dist=replace(config.dist, rollout_workers=0, reward_workers=0))


def build_reward_worker(config: RunConfig, index: int) -> Scorer:
    """What a Ray reward actor holds: the run's scorer (with its own judge models and sandboxes)."""
    configure_sandbox(config.sandbox.isolation)
    return build_scorer(_worker_config(config), policy=None)


def build_rollout_worker(config: RunConfig, index: int) -> tuple[HFPolicy, RolloutWorker]:
    """What a Ray rollout actor holds: its own policy copy (seeded by its index) and generator."""
    config = _worker_config(config)
    configure_sandbox(config.sandbox.isolation)  # its generator may run code (a python tool, code proposals)
    policy = HFPolicy(config.model, seed=config.train.seed + 1000 * (index + 1))
    generation = build_vllm_generation_policy(config, policy) if config.vllm.enabled else policy
    return generation, build_generator(config, generation, build_heldout(config))  # the driver's, from the config


def build_env_factory(config: RunConfig, name: str, args: dict[str, Any] | None = None,
                      ) -> Callable[[], Environment]:
    """Fresh environments of ``name`` (built with ``args``) for training episodes: built in this process, or in
    ``dist.env_workers`` Ray actors (a rollout worker's own, when called in one)."""
    make_env = make_env_factory(name, args)
    if not config.dist.env_workers:
        return make_env
    from autotelic.dist.actors import connect
    from autotelic.dist.envs import RayEnvPool

    connect(config.dist)
    return RayEnvPool(partial(_sandboxed_env, config.sandbox.isolation, make_env), config.dist.env_workers,
                      config.dist.cpus_per_worker)


def _sandboxed_env(isolation: str, make_env: Callable[[], Environment]) -> Environment:
    """An environment built in a Ray actor, whose sandboxes (the python tool's) take the run's isolation."""
    configure_sandbox(isolation)
    return make_env()


def build_generator(config: RunConfig, policy: HFPolicy, heldout: HeldOut, agents: list[HFPolicy] | None = None,
                    ) -> RolloutWorker:
    """``heldout``: what generators that write their own tasks (propose) must not train on."""
    gen = config.generate
    if config.dist.rollout_workers:
        from autotelic.dist.actors import connect
        from autotelic.dist.rollout import RayRolloutPool

        connect(config.dist)
        return RayRolloutPool(partial(build_rollout_worker, config), config.dist.rollout_workers,
                              config.dist.cpus_per_worker, config.dist.gpus_per_worker)
    if gen.mode == "discussion":
        return build_discussion(config, agents or [policy])
    if gen.mode == "tree":
        return TreeSampler(policy, gen.temperature, gen.top_p, gen.tree_branches, gen.tree_branch_samples)
    if gen.mode == "partial":
        return PartialRolloutSampler(policy, gen.temperature, gen.top_p, gen.partial_segment_tokens)
    if gen.mode == "episode":
        return EpisodeSampler(policy, build_env_factory(config, gen.env, gen.env_args), gen.temperature, gen.top_p,
                              config.control.max_turns, turn_tokens=config.control.turn_tokens,
                              max_invalid=config.control.max_invalid)
    if gen.mode == "selfplay":
        opponent = HFPolicy(config.model, seed=config.train.seed) if gen.opponent == "frozen" else None  # never updated
        return SelfPlaySampler(policy, make_game_factory(gen.env), gen.temperature, gen.top_p,
                               config.control.max_turns, opponent)
    if gen.mode == "propose":
        cfg = config.propose
        reward = ProposerReward(cfg.repetition_penalty, cfg.duplicate_threshold, cfg.tool_bonus, cfg.invalid_reward,
                                learnability if cfg.kind == "code" else uncertainty)
        tools = build_env_factory(config, cfg.executor_tools) if cfg.executor_tools else None
        return ProposeSampler(policy, heldout, cfg.answers_per_task, tuple(cfg.band), reward, cfg.phase_steps,
                              cfg.show_example, gen.temperature, gen.top_p, tools, config.control.max_turns, cfg.kind)
    return PolicySampler(policy, gen.temperature, gen.top_p)


def build_operator(config: RunConfig, policy: HFPolicy) -> OperatorAgent:
    cfg, models = config.operator, {"policy": policy}
    roles = {}
    for role in ROLES:
        name = getattr(cfg, role)
        if name not in models:  # base: a fresh, never trained copy of the initial model; else a model directory
            path = config.model.path if name == "base" else name
            models[name] = HFPolicy(replace(config.model, path=path, lora=False), seed=config.train.seed)
        roles[role] = models[name]
    make_env = make_env_factory(config.generate.env, config.generate.env_args)
    return OperatorAgent(roles, make_env, config.control.max_turns, cfg.plan_tokens, cfg.action_tokens,
                         cfg.note_tokens, cfg.keep_recent)


def build_episode_agent(config: RunConfig, policy: HFPolicy) -> RolloutWorker:
    """Held-out episodes: the policy alone, greedy, or the operator agent (``eval.agent``)."""
    if config.eval.agent == "operator":
        return build_operator(config, policy)
    make_env = make_env_factory(config.generate.env, config.generate.env_args)
    return EpisodeSampler(policy, make_env, max_turns=config.control.max_turns, greedy=True,
                          turn_tokens=config.control.turn_tokens, max_invalid=config.control.max_invalid)


def evaluate_heldout(config: RunConfig, policy: HFPolicy, tasks: Sequence[Task], decoding: Decoding | None = None,
                     ) -> EvalResult:
    """Held-out accuracy: whole greedy episodes in episode mode (scored by the environment's success check
    where it has one), else one greedy answer per task (or ``decoding``) scored by the verifier."""
    if config.generate.mode == "episode":
        return evaluate_episodes(build_episode_agent(config, policy), tasks, config.control.max_new_tokens,
                                 config.eval.batch_size)
    return evaluate(policy, tasks, config.eval.max_new_tokens, config.eval.batch_size, decoding)


def build_train_group(config: RunConfig, spec: AlgorithmSpec) -> FSDPTrainGroup:
    from autotelic.dist.fsdp import FSDPTrainGroup

    try:
        return FSDPTrainGroup(config.model, config.algorithm, spec, config.dist, seed=config.train.seed)
    except ValueError as error:
        raise TrainingError(str(error)) from None


def build_pipeline(config: RunConfig, policy: HFPolicy, curriculum: Curriculum, heldout: HeldOut,
                   agents: list[HFPolicy] | None = None, generation: PolicyBackend | None = None) -> RolloutPipeline:
    """``generation``: what samples rollouts when it is not ``policy`` itself (a vLLM engine on its weights)."""
    control, cfg = config.control, config.filter
    replay = (ReplayBuffer(config.replay.capacity, config.replay.max_staleness, config.replay.replay_groups,
                           config.replay.max_reuse) if config.replay.name == "buffer" else OnPolicyBuffer())
    return RolloutPipeline(
        curriculum=curriculum, generator=build_generator(config, generation or policy, heldout, agents),
        scorer=build_scorer(config, policy),
        filters=build_filters(config),
        budget=Budget(control.tasks_per_step, config.generate.group_size, control.max_new_tokens,
                      control.max_tokens_per_step),
        replay=replay, dynamic_sampling=cfg.dynamic_sampling, max_rounds=cfg.max_rounds,
        keep_top_fraction=cfg.keep_top_fraction,
        adaptive_sizes=(control.min_group_size, control.max_group_size) if control.adaptive_group_size else None,
        early_exit_probe=control.early_exit_probe, overlong=control.overlong, overlong_buffer=control.overlong_buffer,
    )


class Trainer:
    """Owns the run directory, the policy and the four stages; ``run()`` trains to the end."""

    def __init__(self, config: RunConfig, run_dir: Path, resume: bool = False):
        self.spec = check_run(config)
        self.isolation = sandbox_isolation(config)  # before the model loads: no isolation, no run
        self.config, self.run_dir = config, run_dir
        random.seed(config.train.seed)
        torch.manual_seed(config.train.seed)
        self.heldout = build_heldout(config)
        self.curriculum = build_curriculum(config, self.heldout)
        self.pairs = load_pairs(config.algorithm.dataset) if self.spec.name == "offline_dpo" else None
        self.baselines = RoleBaselines(config.algorithm.rae_decay) if self.spec.advantage == "rae" else None
        algo = config.algorithm  # the model loads last: bad settings fail before it is read
        self.policy = HFPolicy(config.model, lr=algo.lr, weight_decay=algo.weight_decay,
                               max_grad_norm=algo.max_grad_norm, seed=config.train.seed)
        self.discussion = config.generate.mode == "discussion"
        others = range(1, config.discussion.agents) if self.discussion else range(0)
        self.agents = [self.policy] + [HFPolicy(config.model, lr=algo.lr, weight_decay=algo.weight_decay,
                                                max_grad_norm=algo.max_grad_norm, seed=config.train.seed + i)
                                       for i in others]  # CoMAS: a model per agent; otherwise the policy alone
        if isinstance(self.curriculum, EvolvingPromptPool):
            self.curriculum.attach(build_evolver(config, self.policy))
        in_process_vllm = config.vllm.enabled and not config.dist.rollout_workers
        self.generation = build_vllm_generation_policy(config, self.policy) if in_process_vllm else self.policy
        self.pipeline = build_pipeline(config, self.policy, self.curriculum, self.heldout, self.agents, self.generation)
        self.train_group = build_train_group(config, self.spec) if config.dist.train_workers else None
        if self.train_group is not None:  # the ranks built the same initial weights: the driver follows them
            self._follow_train_group()
        self.checkpoints = CheckpointWriter(run_dir, config.train.keep_checkpoints)
        self.state = TrainState()
        self.ahead: AsyncRollouts | None = None  # dist.async_steps: the thread collecting rollouts ahead
        self._queued: list[StepRollouts] = []  # collected ahead but not trained on, from a checkpoint
        if resume:
            self._restore()
        else:
            save_config(config, run_dir / "config.yaml")

    # ---- asynchronous rollouts --------------------------------------------------------------
    def _start_ahead(self, queued: list[StepRollouts]) -> AsyncRollouts:
        self.pipeline.generator.publish(self.policy)
        return AsyncRollouts(lambda: self.pipeline.collect(self.policy.version), self.config.dist.async_steps,
                             self.state.step, self.config.train.steps, queued)

    def _stop_ahead(self) -> None:
        if self.ahead is not None:
            self._queued, self.ahead = self.ahead.stop(), None

    # ---- checkpoints -----------------------------------------------------------------------
    def _checkpoint(self) -> None:
        if self.ahead is None:
            self._save_checkpoint(self._queued)
            return
        with self.ahead.paused() as queued:  # curriculum, replay and the rollouts collected ahead agree
            self._save_checkpoint(queued)

    def _save_checkpoint(self, queued: list[StepRollouts]) -> None:
        generator = self.pipeline.generator
        payload = {
            "state": copy.deepcopy(self.state.__dict__),
            **_agent_state(self.policy),
            "agents": [_agent_state(agent) for agent in self.agents[1:]],  # CoMAS: the other agents
            "curriculum": copy.deepcopy(self.curriculum.state_dict()),
            "replay": copy.deepcopy(self.pipeline.replay.state_dict()),
            "pending_rollouts": generator.state_dict() if hasattr(generator, "state_dict") else None,
            "queued_rollouts": copy.deepcopy(queued),
            "role_baselines": self.baselines.state_dict() if self.baselines is not None else None,
            "torch_rng": torch.get_rng_state(),
            "logs": {name: _size(self.run_dir / name) for name in STEP_LOGS},
        }
        if self.train_group is not None:  # the driver follows the ranks' weights and version; their optimizer is theirs
            payload["optimizer"] = self.train_group.optimizer_state()
        self.checkpoints.save(self.state.step, payload)

    def _restore(self) -> None:
        found = load_latest(self.run_dir)
        sizes: dict[str, int] = {}  # no checkpoint: killed before the first, start over in the same directory
        if found is not None:
            path, payload = found
            try:
                self._load(payload)
            except (KeyError, ValueError, RuntimeError) as error:  # shapes, agents or stages of another config
                raise TrainingError(f"checkpoint {path} does not fit this run's config: {error}; resume with the "
                                    "settings it was written with, or start a new run") from None
            sizes = payload["logs"]
        for name in STEP_LOGS:  # rows of steps after the checkpoint go, a line cut short by a kill with them
            _truncate(self.run_dir / name, sizes.get(name, 0))

    def _load(self, payload: dict[str, Any]) -> None:
        self.state = TrainState(**payload["state"])
        others = payload.get("agents", [])
        if len(others) != len(self.agents) - 1:
            raise TrainingError(f"the checkpoint holds {len(others) + 1} agents, the config {len(self.agents)}")
        if self.train_group is not None:
            self.train_group.load_state_dict(payload)
            payload = {**payload, "optimizer": self.policy.optimizer.state_dict()}  # the ranks hold the real one
        for agent, saved in zip(self.agents, [payload, *others]):
            _load_agent_state(agent, saved)
        self.curriculum.load_state_dict(payload["curriculum"])
        self.pipeline.replay.load_state_dict(payload["replay"])
        if payload["pending_rollouts"] is not None:
            self.pipeline.generator.load_state_dict(payload["pending_rollouts"])
        self._queued = payload.get("queued_rollouts", [])
        if self.baselines is not None and payload.get("role_baselines") is not None:  # None: saved by another algorithm
            self.baselines.load_state_dict(payload["role_baselines"])
        torch.set_rng_state(payload["torch_rng"])

    # ---- evaluation ------------------------------------------------------------------------
    def _evaluate(self, tag: str, policy: HFPolicy | None = None) -> EvalResult:
        result = evaluate_heldout(self.config, policy or self.policy, self.heldout)
        _write_jsonl(self.run_dir / f"eval_{tag}.jsonl", result.records)
        return result

    def _evaluate_discussion(self, tag: str, first: EvalResult) -> dict[str, Any]:
        """CoMAS: each agent's held-out accuracy alone (greedy; agent 0's is ``first``), then the agents'
        greedy discussion of every held-out task (records in eval_<tag>_discussion.jsonl)."""
        alone = [first.accuracy] + [self._evaluate(f"{tag}_agent{i}", agent).accuracy
                                    for i, agent in enumerate(self.agents[1:], 1)]
        summary, records = evaluate_discussion(build_discussion(self.config, self.agents, greedy=True), self.heldout,
                                               self.config.eval.max_new_tokens, self.config.eval.batch_size)
        _write_jsonl(self.run_dir / f"eval_{tag}_discussion.jsonl", records)
        return {"agents": alone, "discussion": summary}

    def _value_stage(self, say) -> dict[str, Any]:
        """VM-MCTS after training: value targets by search, the value model, held-out decodings."""
        say(f"VM-MCTS: searching {self.config.value.tasks} training tasks for value targets")
        scorer = response_scorer(self.pipeline.scorer)
        model, metrics = train_value_model(self.policy, self.config, scorer, self.heldout, self.run_dir / "model",
                                           self.run_dir / "value_model")
        decodings = evaluate_decodings(self.policy, self.heldout, self.config, model, self.run_dir)
        for strategy, result in decodings.items():
            say(f"held-out accuracy with {strategy}: {result['accuracy']:.1%} "
                f"({result['tokens_per_task']:.0f} tokens per task)")
        return {"metrics": metrics, "decodings": decodings}

    # ---- one step --------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        started = time.perf_counter()
        if self.pairs is not None:
            return self._offline_dpo_step(started)
        if self.config.dist.async_steps:  # collected ahead, from weights at most async_steps updates old
            if self.ahead is None:
                self.ahead = self._start_ahead(self._queued)
            rollouts = self.ahead.next()
            metrics = {**rollouts.metrics, **staleness_metrics(rollouts.batch, self.policy.version)}
        else:
            if hasattr(self.pipeline.generator, "publish"):  # remote rollout workers take the current weights
                self.pipeline.generator.publish(self.policy)
            rollouts = self.pipeline.collect(self.policy.version)
            metrics = dict(rollouts.metrics)
            if self.generation is not self.policy:  # vllm.sleep: the engine frees the GPU for the update
                self.generation.sleep()
        generated = time.perf_counter()
        if rollouts.batch:
            self.checkpoints.wait()  # the update mutates the tensors a checkpoint may still be writing
        trained = False
        try:
            for index, agent in enumerate(self.agents):  # each agent learns from its own groups only
                batch = [g for g in rollouts.batch if agent_of(g) == index]
                if batch:
                    update = self._update(agent, batch)
                    metrics.update(update if len(self.agents) == 1
                                   else {f"agent{index}/{k}": v for k, v in update.items()})
            trained = True
        finally:
            if self.ahead is not None:  # the next rollouts may start, from the new weights
                self.pipeline.generator.publish(self.policy)
                self.ahead.step_done(trained)
        finished = time.perf_counter()
        groups = rollouts.groups
        tokens = sum(g.num_completion_tokens for g in groups)
        scored = [g for g in groups if g.dropped_by not in ("reward_error", "unscorable")]
        rewards = [r for g in scored for r in g.rewards]
        metrics.update({
            "reward/mean": sum(rewards) / max(1, len(rewards)),
            "time/rollout": generated - started,
            "time/update": finished - generated,
            "time/step": finished - started,
            "perf/tokens_per_second": tokens / max(1e-9, finished - started),
        })
        by_family: dict[str, list[float]] = defaultdict(list)
        for group in scored:
            by_family[group.task.family].extend(group.rewards)
        metrics.update({f"reward/{name}": sum(v) / len(v) for name, v in by_family.items()})
        episodes = [s for g in groups for s in g.samples if "turns" in s.info]
        if episodes:
            metrics["episode/turns"] = sum(s.info["turns"] for s in episodes) / len(episodes)
            metrics["episode/invalid_actions"] = sum(s.info["invalid_actions"] for s in episodes) / len(episodes)
            calls = sum(s.info.get("env", {}).get("tool_calls", 0) for s in episodes)
            if calls or any("tool_calls" in s.info.get("env", {}) for s in episodes):
                successes = sum(s.info["env"].get("tool_successes", 0) for s in episodes)
                metrics["tools/calls_per_episode"] = calls / len(episodes)
                metrics["tools/success_rate"] = successes / calls if calls else 0.0
            metrics.update(web_metrics(episodes))
        metrics.update(proposal_metrics(groups))
        if self.discussion:
            metrics.update(discussion_metrics(groups))
        for name, part in self._worker_pools().items():
            if hasattr(part, "restarts"):  # Ray actors replaced after dying, so far
                metrics[f"dist/{name}"] = float(part.restarts)
        if hasattr(self.pipeline.generator, "env_restarts") and self.config.dist.env_workers:
            metrics["dist/env_worker_restarts"] = float(self.pipeline.generator.env_restarts())  # in rollout workers
        pending = getattr(self.pipeline.generator, "pending", None)
        if pending is not None:  # partial rollouts still paused mid-generation
            metrics["generate/pending_groups"] = float(len(pending))
        self.state.completion_tokens += tokens
        self.state.train_seconds += finished - started
        self._write_rollouts(groups)
        self._write_population()
        return metrics

    def _worker_pools(self) -> dict[str, Any]:
        """The stages that may run on Ray actors, by the name of their restart metric (in-process ones have none)."""
        generator = self.pipeline.generator
        return {"worker_restarts": generator, "reward_worker_restarts": self.pipeline.scorer,
                "env_worker_restarts": getattr(generator, "make_env", None)}  # episode environments' RayEnvPool

    def _write_population(self) -> None:
        """eva: each prompt evolution of this step (seeds, their informativeness, the new prompts)."""
        if not isinstance(self.curriculum, EvolvingPromptPool):
            return
        rows = [{"step": self.state.step + 1, **event} for event in self.curriculum.take_events()]
        _write_jsonl(self.run_dir / "population.jsonl", rows, append=True)

    def _follow_train_group(self) -> None:
        """The driver's policy takes the FSDP ranks' weights (for evaluation, export and rollouts)."""
        self.policy.load_trainable_state(self.train_group.trainable_state())
        self.policy.version = self.train_group.version

    def _update(self, policy: HFPolicy, batch: list[Group]) -> dict[str, float]:
        config = self.config
        if self.train_group is not None:
            try:
                return self.train_group.update(batch, config.generate.temperature, config.control.max_new_tokens)
            finally:  # a skipped step changed nothing, but the versions must still agree
                self._follow_train_group()
        if self.spec.kind == "dpo":
            return dpo_update(policy, rollout_pairs(batch), config.algorithm)
        return policy_gradient_update(policy, batch, self.spec, config.algorithm, config.generate.temperature,
                                      config.control.max_new_tokens, self.baselines)

    def _offline_dpo_step(self, started: float) -> dict[str, float]:
        """Offline DPO: the next ``tasks_per_step`` pairs of the dataset (reshuffled every epoch)."""
        count = self.config.control.tasks_per_step
        batch = []
        for position in range(self.state.pairs_seen, self.state.pairs_seen + count):
            epoch, index = divmod(position, len(self.pairs))
            order = list(range(len(self.pairs)))
            random.Random(f"{self.config.train.seed}/{epoch}").shuffle(order)
            row = self.pairs[order[index]]
            batch.append(PreferencePair(self.policy.encode_prompt(row["prompt"]),
                                        self.policy.encode_completion(row["chosen"]),
                                        self.policy.encode_completion(row["rejected"])))
        self.checkpoints.wait()
        if self.train_group is not None:
            try:
                metrics = self.train_group.update_pairs(batch)
            finally:
                self._follow_train_group()
        else:
            metrics = dpo_update(self.policy, batch, self.config.algorithm)
        self.state.pairs_seen += count
        finished = time.perf_counter()
        self.state.train_seconds += finished - started
        metrics.update({"time/step": finished - started, "time/update": finished - started,
                        "reward/mean": metrics.get("train/reward_accuracy", 0.0),
                        "perf/tokens_per_second": 0.0})
        return metrics

    def _write_rollouts(self, groups: list[Group]) -> None:
        limit = self.config.logging.rollouts_per_step
        rows = [
            {"step": self.state.step + 1, "family": g.task.family, "level": g.task.level, "prompt": g.task.prompt,
             "answer": g.task.answer, **({"response_prefix": g.task.response_prefix} if g.task.response_prefix else {}),
             "completion": s.text, "finished": s.finished,
             "reward": s.reward if s.reward is not None and math.isfinite(s.reward) else None,
             "kept": g.kept, "filter": g.dropped_by or "kept", "policy_version": s.policy_version,
             **({"parent": s.parent, "branch_at": s.branch_at} if s.parent is not None else {}),
             **({"turns": s.info["turns"], "observations": s.info["observations"]} if "turns" in s.info else {}),
             **{key: s.info[key] for key in LOGGED_INFO if key in s.info}}
            for g in groups for s in g.samples
        ][:limit]
        _write_jsonl(self.run_dir / "rollouts.jsonl", rows, append=True)

    # ---- the whole run ---------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        config, state = self.config, self.state
        run_started = time.perf_counter()
        sandbox = {"sandbox": self.isolation} if self.isolation else {}  # where model-written code ran
        heldout_kind = {"heldout_kind": self.heldout.kind}  # every row says what its eval/accuracy measures
        sink = MultiSink(self.run_dir, config.logging.tensorboard, config.logging.wandb, config.logging.mlflow,
                         to_dict(config), {**sandbox, **heldout_kind})
        say = print
        try:
            if state.eval_before is None:
                before = self._evaluate("before")
                state.eval_before = before.summary()
                state.evals.append({"step": 0, "accuracy": before.accuracy})
                if self.discussion:
                    state.discussion_before = self._evaluate_discussion("before", before)
            if self.discussion:
                say(f"CoMAS before training: {_show_discussion(state.discussion_before)}")
            say(f"{self.heldout.label} accuracy before training: {state.eval_before['accuracy']:.1%} "
                f"({len(self.heldout)} tasks, greedy)")
            failed_steps = 0
            with ProgressDisplay(config.train.steps, state.step, state.evals[-1]["accuracy"],
                                 config.logging.progress) as progress:
                say = progress.print
                while state.step < config.train.steps:
                    if config.train.max_minutes is not None and state.train_seconds > 60 * config.train.max_minutes:
                        say(f"train.max_minutes={config.train.max_minutes} reached after {state.step} steps")
                        break
                    try:
                        metrics = self.step()
                        failed_steps = 0
                    except FloatingPointError as error:
                        failed_steps += 1
                        say(f"step {state.step + 1}: {error}")
                        if failed_steps >= MAX_CONSECUTIVE_FAILED_STEPS:
                            raise TrainingError(f"{failed_steps} consecutive failed steps ({error}); stopping. "
                                                f"Checkpoints in {self.run_dir / 'checkpoints'} are intact") from error
                        continue
                    state.step += 1
                    accuracy = None
                    if config.eval.every and state.step % config.eval.every == 0 and state.step < config.train.steps:
                        accuracy = self._evaluate(f"step{state.step}").accuracy
                        metrics["eval/accuracy"] = accuracy
                        state.evals.append({"step": state.step, "accuracy": accuracy})
                    sink.log(state.step, metrics)
                    shares = {k[len(SHARE_PREFIX):]: v for k, v in metrics.items() if k.startswith(SHARE_PREFIX)}
                    progress.update(state.step, metrics["reward/mean"], metrics["perf/tokens_per_second"], shares,
                                    accuracy)
                    if state.step % config.train.checkpoint_every == 0 or state.step == config.train.steps:
                        state.wall_seconds += time.perf_counter() - run_started
                        run_started = time.perf_counter()
                        self._checkpoint()
            self._stop_ahead()  # rollouts collected for steps past a time limit wait in the last checkpoint
            after = self._evaluate("after")
            discussion_after = self._evaluate_discussion("after", after) if self.discussion else None
            self.policy.export(self.run_dir / "model")
            for index, agent in enumerate(self.agents[1:], 1):
                agent.export(self.run_dir / "agents" / str(index))
            state.wall_seconds += time.perf_counter() - run_started
            self._checkpoint()
            self.checkpoints.wait()
            # logged after the last checkpoint, which a resume would otherwise log again
            sink.log(state.step, {"eval/accuracy": after.accuracy})
            evals = [*state.evals, {"step": state.step, "accuracy": after.accuracy}]
            value = self._value_stage(say) if config.value.enabled else None  # the trained policy is safe by now
            summary = {
                "eval_before": state.eval_before, "eval_after": after.summary(), "steps": state.step,
                "wall_seconds": round(state.wall_seconds, 1), "train_seconds": round(state.train_seconds, 1),
                "completion_tokens": state.completion_tokens, **self.heldout.summary(),
                "model_dir": str(self.run_dir / "model"), "evals": evals, **sandbox,
                **({"value": value} if value is not None else {}),
                **({"comas": {"before": state.discussion_before, "after": discussion_after}}
                   if self.discussion else {}),
            }
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        finally:
            self._stop_ahead()
            sink.close()
            self.checkpoints.wait()
            for part in (*self._worker_pools().values(), self.train_group):
                if hasattr(part, "shutdown"):  # Ray actors
                    part.shutdown()
        from autotelic.report.html import write_report

        write_report(self.run_dir)
        if self.discussion:
            say(f"CoMAS after training: {_show_discussion(discussion_after)}")
        say(f"{self.heldout.label} accuracy: before {state.eval_before['accuracy']:.1%} -> after {after.accuracy:.1%} "
            f"after {state.step} steps in {state.wall_seconds / 60:.1f} min; run directory {self.run_dir}")
        return summary


def _agent_state(policy: HFPolicy) -> dict[str, Any]:
    return {"trainable": policy.trainable_state(), "optimizer": policy.optimizer.state_dict(),
            "policy_version": policy.version, "generator": policy.generator.get_state()}


def _load_agent_state(policy: HFPolicy, saved: dict[str, Any]) -> None:
    policy.load_trainable_state(saved["trainable"])
    policy.optimizer.load_state_dict(saved["optimizer"])
    policy.version = saved["policy_version"]
    policy.generator.set_state(saved["generator"])


def _show_discussion(result: dict[str, Any]) -> str:
    alone = ", ".join(f"{accuracy:.1%}" for accuracy in result["agents"])
    return f"agents alone {alone}; discussion {result['discussion']['accuracy']:.1%} (last round's answer)"


def _write_jsonl(path: Path, rows: list[dict[str, Any]], append: bool = False) -> None:
    with path.open("a" if append else "w") as file:
        for row in rows:
            file.write(json.dumps(row) + "\n")


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _truncate(path: Path, size: int) -> None:
    if _size(path) > size:
        os.truncate(path, size)


def train(config: RunConfig) -> dict[str, Any]:
    check_run(config)  # a bad setting stops before the run directory exists
    run_dir = new_run_dir(config)
    was_empty = not any(run_dir.iterdir())
    try:
        trainer = Trainer(config, run_dir)
    except BaseException:  # e.g. damaged weights: no half-made run is left to resume
        if was_empty:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return trainer.run()


def run_config_path(run_dir: Path) -> Path:
    """The config.yaml of run directory ``run_dir``, which must be one."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise TrainingError(f"{run_dir} is not a run directory (no config.yaml)")
    return path


def resume(run_dir: Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    config_path = run_config_path(run_dir)
    config = load_config(config_path, overrides)
    trainer = Trainer(config, run_dir, resume=True)
    if overrides:  # the run's config changes only once the overrides proved to work with its checkpoint
        save_config(config, config_path)
    return trainer.run()
