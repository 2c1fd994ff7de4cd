"""FSDP2 training across Ray actors, on a real local Ray cluster. The model is ``random:qwen2-tiny`` (Qwen2's
architecture, two layers, random weights, the embedded tokenizer): whether the ranks' sharded update equals the
driver's does not depend on the weights, and at this size the ranks' work is mostly their collectives."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import pytest
import ray
import torch

from autotelic.algorithms import get_algorithm
from autotelic.backends.hf import HFPolicy
from autotelic.config import RunConfig
from autotelic.dist.actors import ClusterTooSmallError
from autotelic.dist.fsdp import FSDPTrainGroup, TrainWorkerError, _shares
from autotelic.loading import load_config
from autotelic.types import Group, Sample, Task
from autotelic.update import dpo_update, policy_gradient_update, rollout_pairs

# Ray instances and several processes at once: one xdist worker runs them in turn, on every core.
pytestmark = [pytest.mark.all_cores, pytest.mark.xdist_group("ray")]

# one group per micro-batch and two passes over the batch: the ranks' shares take 2 and 1 micro-batches, and the
# second pass reads the weights the first step wrote
CONFIG = ["model.path=random:qwen2-tiny", "model.threads=1", "model.lora=true", "model.lora_rank=8",
          "algorithm.lr=1e-3", "algorithm.micro_batch_groups=1", "algorithm.updates_per_batch=2", "dist.train_workers=2"]
TEMPERATURE, MAX_NEW_TOKENS = 0.7, 8


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _policy(config: RunConfig) -> HFPolicy:
    """The driver's policy: two threads while the ranks (one thread each) wait."""
    torch.manual_seed(0)  # LoRA's initial adapters: the ranks seed the same
    algo = config.algorithm
    return HFPolicy(replace(config.model, threads=2), lr=algo.lr, weight_decay=algo.weight_decay,
                    max_grad_norm=algo.max_grad_norm)


def _groups(policy: HFPolicy, count: int) -> list[Group]:
    """Sampled groups whose rewards differ (sample 0 or 1 is right), so every group has a gradient."""
    prompts = [policy.encode_prompt(f"What is {i} + {i}? Answer with the number.") for i in range(count)]
    groups = []
    for i, (prompt, completions) in enumerate(zip(prompts, policy.generate(prompts, 2, MAX_NEW_TOKENS, TEMPERATURE))):
        samples = [Sample(policy.decode(c.token_ids), c.token_ids, c.logprobs, c.finished, reward=float(j == i % 2))
                   for j, c in enumerate(completions)]
        groups.append(Group(Task("", str(2 * i), "add", 1, f"add{i}"), prompt, samples))
    return groups


def _clone(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in state.items()}


def _assert_equal_states(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    assert all(torch.equal(got[key], want[key]) for key in want)


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float((a[key] - b[key]).norm()) ** 2 for key in b))


# a group-relative loss is zero in expectation: its value, ~1e-7, is float noise that the ranks' summation order
# and the CPU's kernels change (-1.1e-7 against -4.5e-7 on an AVX-512 machine)
LOSS_NOISE = 1e-6
METRIC_NOISE = 1e-3  # relative: the gradient norm after two sharded updates differs by 2e-4 there


def _assert_same_update(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
                        initial: dict[str, torch.Tensor]) -> None:
    """``got`` and ``want`` moved alike from ``initial``: what tells them apart is float noise next to the change
    (a wrong gradient moves Adam's weights by as much as the change itself). The noise depends on the CPU's kernels:
    0.2% of the change on an AVX-512 machine, where Adam's normalisation amplifies the sign of near-zero gradients
    summed in another order; 1% still tells a wrong gradient (~100%) apart."""
    assert set(got) == set(want)
    difference, change = _distance(got, want), _distance(want, initial)
    assert change > 0 and difference <= 1e-2 * change, f"difference {difference} against a change of {change}"


@dataclass
class _Trained:
    """One update of the same batch from the same weights, by the driver in-process and by the FSDP group."""

    policy: HFPolicy
    group: FSDPTrainGroup
    batch: list[Group]
    fresh: dict | None  # the group's state before the update: initial weights, no optimizer state
    metrics: dict[str, float]  # the driver's
    trained: dict[str, torch.Tensor]  # the driver's weights after the update


def _learning(metrics: dict[str, float]) -> dict[str, float]:
    """The ranks' metrics less their memory, which the driver's own update does not report."""
    return {key: value for key, value in metrics.items() if not key.startswith("perf/train_worker_")}


def _train_both_and_compare(config: RunConfig, count: int, states: bool) -> _Trained:
    """``count`` groups: the same metrics and weights after the update, and (``states``) the same initial weights
    and optimizer state."""
    spec = get_algorithm(config.algorithm.name)
    policy = _policy(config)
    batch = _groups(policy, count)
    group = FSDPTrainGroup(config.model, config.algorithm, spec, config.dist, seed=0)
    initial = _clone(policy.trainable_state())
    fresh = group.state_dict() if states else None
    if fresh is not None:
        _assert_equal_states(fresh["trainable"], initial)  # same seed, same weights, same keys

    expected = policy_gradient_update(policy, batch, spec, config.algorithm, TEMPERATURE, MAX_NEW_TOKENS)
    metrics = group.update(batch, TEMPERATURE, MAX_NEW_TOKENS)
    assert set(metrics) == {*expected, "perf/train_worker_peak_rss_mib"}  # and the largest rank's memory (CPU)
    assert metrics.pop("perf/train_worker_peak_rss_mib") > 100
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=METRIC_NOISE, abs=LOSS_NOISE), key
    assert group.version == policy.version == config.algorithm.updates_per_batch

    trained = _clone(policy.trainable_state())
    _assert_same_update(group.trainable_state(), trained, initial)
    if states:  # Adam's moments hold the gradients, whose scale its step hides: the same moments
        saved = group.state_dict()["optimizer"]["state"]
        names = {param: name for name, param in policy.model.named_parameters()}
        for moment in ("exp_avg", "exp_avg_sq"):
            want = {names[param]: state[moment] for param, state in policy.optimizer.state.items()}
            got = {name: saved[name][moment] for name in want}
            assert _distance(got, want) <= 1e-3 * _distance(want, {name: torch.zeros(()) for name in want}), moment
    return _Trained(policy, group, batch, fresh, expected, trained)


@pytest.mark.slow
def test_lora_ranks_train_as_the_driver_does_skip_together_and_a_dead_rank_is_named(cluster):
    config = load_config(None, CONFIG)
    run = _train_both_and_compare(config, count=3, states=True)
    group, policy, fresh = run.group, run.policy, run.fresh
    assert fresh is not None

    # the gathered state loads into an HFPolicy
    policy.load_trainable_state(fresh["trainable"])
    _assert_equal_states(policy.trainable_state(), fresh["trainable"])
    gathered = group.trainable_state()
    policy.load_trainable_state(gathered)
    _assert_equal_states(policy.trainable_state(), gathered)

    # a checkpoint's state loads back into the group: the initial weights and no optimizer state
    group.load_state_dict({**fresh, "policy_version": 7})
    _assert_equal_states(group.trainable_state(), fresh["trainable"])
    assert group.version == 7

    # a non-finite loss on rank 1 (the last group is its share) skips the step on every rank and leaves nothing
    # behind: the same update then gives the same result as the first time
    last = run.batch[2]
    broken = run.batch[:2] + [replace(last, samples=[replace(s, logprobs=[math.nan] * len(s.logprobs))
                                                     for s in last.samples])]
    with pytest.raises(FloatingPointError, match="loss is nan.*train rank 1"):
        group.update(broken, TEMPERATURE, MAX_NEW_TOKENS)
    _assert_equal_states(group.trainable_state(), fresh["trainable"])
    assert group.version == 7
    metrics = _learning(group.update(run.batch, TEMPERATURE, MAX_NEW_TOKENS))
    assert metrics == pytest.approx(run.metrics, rel=METRIC_NOISE, abs=LOSS_NOISE)
    _assert_same_update(group.trainable_state(), run.trained, fresh["trainable"])

    # online DPO's pairs, from the same weights and optimizer state (LoRA's reference: the adapters turned off)
    pairs = rollout_pairs(run.batch)
    before = _clone(policy.trainable_state())
    expected = dpo_update(policy, pairs, config.algorithm)
    assert _learning(group.update_pairs(pairs)) == pytest.approx(expected, rel=METRIC_NOISE, abs=LOSS_NOISE)
    _assert_same_update(group.trainable_state(), policy.trainable_state(), before)

    # a batch of one group: rank 0 has no share, yet takes the same steps (and collectives) as rank 1
    before = _clone(policy.trainable_state())
    expected = policy_gradient_update(policy, run.batch[:1], get_algorithm("grpo"), config.algorithm, TEMPERATURE,
                                      MAX_NEW_TOKENS)
    assert _learning(group.update(run.batch[:1], TEMPERATURE, MAX_NEW_TOKENS)) == pytest.approx(
        expected, rel=METRIC_NOISE, abs=LOSS_NOISE)
    _assert_same_update(group.trainable_state(), policy.trainable_state(), before)

    ray.kill(group.actors[1])
    with pytest.raises(TrainWorkerError, match="rank 1 died.*last checkpoint"):
        group.update(run.batch, TEMPERATURE, MAX_NEW_TOKENS)
    with pytest.raises(TrainWorkerError, match="rank 1 died"):  # the group stays stopped
        group.trainable_state()


@pytest.mark.slow
def test_full_fine_tuning_ranks_train_as_the_driver_does(cluster):
    dropped = ("model.lora", "algorithm.updates_per_batch")  # one pass: the LoRA test covers the second
    config = load_config(None, [option for option in CONFIG if not option.startswith(dropped)])
    _train_both_and_compare(config, count=2, states=False).group.shutdown()


def test_shares_are_contiguous_and_every_rank_gets_one():
    assert _shares([1, 2, 3], 2) == [[1, 2], [3]]
    assert _shares([1], 2) == [[], [1]]
    assert _shares([], 3) == [[], [], []]


def test_fsdp_settings_that_cannot_work_are_named():
    for options, algorithm, message in [
        ([], "spiral", "cannot train algorithm.name=spiral"),
        ([], "reinforce_pp_baseline", "reinforce_pp_baseline: its advantages are whitened over every group"),
        (["dist.train_workers=0"], "grpo", "train_workers must be at least 1"),
        (["dist.gpus_per_worker=0.5"], "grpo", "gpus_per_worker=0.5: a train rank needs whole GPUs"),
    ]:
        config = load_config(None, ["dist.train_workers=2", *options])
        with pytest.raises(ValueError, match=message):  # before any actor starts
            FSDPTrainGroup(config.model, config.algorithm, get_algorithm(algorithm), config.dist, seed=0)


def test_gpu_ranks_on_a_cluster_without_gpus_are_named_before_ray_waits(cluster):
    """dist.gpus_per_worker=1 gives each rank a whole GPU (NCCL); on this CPU cluster no node has one."""
    config = load_config(None, ["dist.train_workers=2", "dist.gpus_per_worker=1"])
    with pytest.raises(ClusterTooSmallError, match="each train worker asks Ray for 1 GPU, but no node"):
        FSDPTrainGroup(config.model, config.algorithm, get_algorithm("grpo"), config.dist, seed=0)


@pytest.mark.slow
def test_the_trainer_updates_through_the_ranks_and_resumes_from_their_checkpoint(cluster, tmp_path):
    """dist.train_workers=2 in a whole run: every update goes through the ranks, the driver's policy follows their
    weights and version, and a resumed run's ranks start from the checkpointed weights and optimizer."""
    from autotelic.checkpoint import latest_checkpoint, load_checkpoint
    from autotelic.run_state import new_run_dir
    from autotelic.trainer import Trainer

    config = load_config(None, CONFIG + [
        "train.steps=1", "control.tasks_per_step=2", "generate.group_size=4",
        "control.max_new_tokens=8", "filter.drop_zero_variance=false", "curriculum.families=[add]",
        "filter.rewards=[{name: length, options: {max_chars: 30}}]",  # varies with what the random model wrote
        "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1", "eval.max_new_tokens=8", "eval.every=0",
        "logging.progress=false", "train.max_minutes=null", f"logging.runs_dir={tmp_path}", "logging.run_name=run"])
    trainer = Trainer(config, new_run_dir(config))
    initial = {k: v.clone() for k, v in trainer.policy.trainable_state().items()}
    assert trainer.run()["steps"] == 1
    step_row = next(json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
                    if "train/loss" in line)
    assert step_row["perf/train_worker_peak_rss_mib"] > 100  # the largest rank's own process, beside the driver's
    trained = trainer.policy.trainable_state()
    assert trainer.policy.version == 2  # one step of two optimizer steps (updates_per_batch=2), on the ranks
    assert any(not torch.equal(v, initial[k]) for k, v in trained.items())
    saved = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert saved["policy_version"] == 2 and saved["optimizer"] is not None
    assert all(torch.equal(saved["trainable"][k], v) for k, v in trained.items())
    resumed = Trainer(load_config(tmp_path / "run" / "config.yaml"), tmp_path / "run", resume=True)
    try:
        assert resumed.policy.version == 2
        assert all(torch.equal(v, trained[k]) for k, v in resumed.train_group.trainable_state().items())
    finally:
        resumed.train_group.shutdown()
