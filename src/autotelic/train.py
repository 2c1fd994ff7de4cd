"""The training loop. One step is data flowing through the four rollout stages:

    curriculum.next_tasks -> Generate -> Filter (verifier rewards, zero-variance groups)
    -> Control (token budget, truncation) -> Replay -> GRPO update -> curriculum.observe

Every step appends to metrics.jsonl and rollouts.jsonl and (every ``checkpoint_every`` steps)
writes a checkpoint that ``autotelic resume`` continues from exactly.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from autotelic.algorithms import ALGORITHMS, GRPOSettings, group_advantages, grpo_loss
from autotelic.backends.hf import HFPolicy
from autotelic.checkpoint import CheckpointWriter, latest_checkpoint, load_checkpoint
from autotelic.config import RunConfig, load_config, save_config, to_dict
from autotelic.curricula.learnability import LearnabilityCurriculum
from autotelic.evaluate import EvalResult, evaluate, heldout_tasks
from autotelic.report.progress import ProgressDisplay
from autotelic.report.sinks import MultiSink
from autotelic.rollout.control import Budget
from autotelic.rollout.filter import (
    ZeroVarianceFilter,
    apply_filters,
    score_groups,
    verifier_reward,
)
from autotelic.rollout.generate import PolicySampler
from autotelic.rollout.replay import OnPolicyBuffer
from autotelic.types import Group

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_FAILED_STEPS = 3


class TrainingError(RuntimeError):
    pass


def new_run_dir(config: RunConfig) -> Path:
    name = config.logging.run_name or datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(config.logging.runs_dir) / name
    if (run_dir / "config.yaml").exists():
        raise TrainingError(f"run directory {run_dir} already holds a run: use `autotelic resume {run_dir}`")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


@dataclass
class TrainState:
    step: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    completion_tokens: int = 0
    eval_before: dict[str, Any] | None = None
    evals: list[dict[str, Any]] = field(default_factory=list)  # {"step", "accuracy", ...} over time


def _pad(rows: list[list[float]]) -> torch.Tensor:
    out = torch.zeros(len(rows), max(1, max(len(r) for r in rows)))
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def grpo_update(policy: HFPolicy, groups: list[Group], config: RunConfig) -> dict[str, float]:
    """One or more gradient steps on a batch of kept groups (micro-batched, exact accumulation)."""
    algo, n = config.algorithm, config.generate.group_size
    settings = GRPOSettings(algo.clip_low, algo.clip_high, algo.beta, algo.kl_estimator, algo.loss_agg)
    rewards_B = torch.tensor([r for g in groups for r in g.rewards])
    advantages_B = group_advantages(rewards_B, n, scale=algo.scale_rewards)
    samples = [s for g in groups for s in g.samples]
    normalizer = (sum(len(s.token_ids) for s in samples) if algo.loss_agg == "token-mean" else len(samples))
    totals: dict[str, float] = defaultdict(float)
    chunks = [groups[i:i + algo.micro_batch_groups] for i in range(0, len(groups), algo.micro_batch_groups)]
    for _ in range(algo.updates_per_batch):
        offset = 0
        for chunk in chunks:
            chunk_samples = [s for g in chunk for s in g.samples]
            prompts = [g.prompt_ids for g in chunk]
            completions = [s.token_ids for s in chunk_samples]
            logprobs_BT, mask_BT = policy.completion_logprobs(prompts, completions, n, config.generate.temperature)
            old_logprobs_BT = _pad([s.logprobs for s in chunk_samples])
            ref_logprobs_BT = None
            if algo.beta > 0:
                ref_logprobs_BT, _ = policy.completion_logprobs(prompts, completions, n,
                                                                config.generate.temperature, reference=True)
            advantages = advantages_B[offset:offset + len(chunk_samples)]
            offset += len(chunk_samples)
            loss, stats = grpo_loss(logprobs_BT, old_logprobs_BT, advantages, mask_BT, settings,
                                    ref_logprobs_BT, normalizer=normalizer)
            if not torch.isfinite(loss):
                policy.optimizer.zero_grad(set_to_none=True)
                raise FloatingPointError(f"loss is {loss.item()}; update skipped")
            loss.backward()
            totals["train/loss"] += loss.item()
            for key, value in stats.items():
                totals[f"train/{key}"] += value * len(chunk) / len(groups)
        totals.update({f"train/{k}": v for k, v in policy.optimizer_step().items()})
    return {k: v / (algo.updates_per_batch if k != "train/grad_norm" else 1) for k, v in totals.items()}


class Trainer:
    """Owns the run directory, the policy and the four stages; ``run()`` trains to the end."""

    def __init__(self, config: RunConfig, run_dir: Path, resume: bool = False):
        if config.algorithm.name not in ALGORITHMS:
            raise TrainingError(f"unknown algorithm.name '{config.algorithm.name}'; available: {', '.join(ALGORITHMS)}")
        self.config, self.run_dir = config, run_dir
        random.seed(config.train.seed)
        torch.manual_seed(config.train.seed)
        cur = config.curriculum
        self.heldout = heldout_tasks(cur.families, config.eval.levels, config.eval.per_level, config.eval.seed)
        self.curriculum = LearnabilityCurriculum(
            cur.families, cur.levels, seed=config.train.seed, exclude={t.uid for t in self.heldout},
            strategy=cur.name, temperature=cur.temperature, ema=cur.ema, prior_pass_rate=cur.prior_pass_rate)
        algo = config.algorithm  # the model loads last: bad task settings fail before it is read
        self.policy = HFPolicy(config.model, lr=algo.lr, weight_decay=algo.weight_decay,
                               max_grad_norm=algo.max_grad_norm, seed=config.train.seed)
        self.sampler = PolicySampler(self.policy, config.generate.temperature, config.generate.top_p)
        self.filters = [ZeroVarianceFilter()] if config.filter.drop_zero_variance else []
        self.budget = Budget(config.control.tasks_per_step, config.generate.group_size,
                             config.control.max_new_tokens, config.control.max_tokens_per_step)
        self.buffer = OnPolicyBuffer()
        self.checkpoints = CheckpointWriter(run_dir, config.train.keep_checkpoints)
        self.state = TrainState()
        if resume:
            self._restore()
        else:
            save_config(config, run_dir / "config.yaml")

    # ---- checkpoints -----------------------------------------------------------------------
    def _checkpoint(self) -> None:
        payload = {
            "state": copy.deepcopy(self.state.__dict__),
            "trainable": self.policy.trainable_state(),
            "optimizer": self.policy.optimizer.state_dict(),
            "policy_version": self.policy.version,
            "generator": self.policy.generator.get_state(),
            "curriculum": self.curriculum.state_dict(),
            "torch_rng": torch.get_rng_state(),
        }
        self.checkpoints.save(self.state.step, payload)

    def _restore(self) -> None:
        path = latest_checkpoint(self.run_dir)
        if path is not None:  # else: killed before the first checkpoint, start over in the same directory
            self._load(load_checkpoint(path))
        for name in ("metrics.jsonl", "rollouts.jsonl"):  # drop rows of steps after the checkpoint
            _truncate_jsonl(self.run_dir / name, self.state.step)

    def _load(self, payload: dict[str, Any]) -> None:
        self.state = TrainState(**payload["state"])
        self.policy.load_trainable_state(payload["trainable"])
        self.policy.optimizer.load_state_dict(payload["optimizer"])
        self.policy.version = payload["policy_version"]
        self.policy.generator.set_state(payload["generator"])
        self.curriculum.load_state_dict(payload["curriculum"])
        torch.set_rng_state(payload["torch_rng"])

    # ---- evaluation ------------------------------------------------------------------------
    def _evaluate(self, tag: str) -> EvalResult:
        result = evaluate(self.policy, self.heldout, self.config.eval.max_new_tokens, self.config.eval.batch_size)
        with (self.run_dir / f"eval_{tag}.jsonl").open("w") as file:
            for record in result.records:
                file.write(json.dumps(record) + "\n")
        return result

    # ---- one step --------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        config = self.config
        started = time.perf_counter()
        tasks = self.curriculum.next_tasks(self.budget.plan())
        groups = self.sampler.generate(tasks, config.generate.group_size, config.control.max_new_tokens)
        generated = time.perf_counter()
        score_groups(groups, verifier_reward)
        filter_stats = apply_filters(groups, self.filters)
        metrics = {**filter_stats.as_metrics(), **self.budget.enforce(groups)}
        metrics.update(self.curriculum.observe(groups))
        self.buffer.add(groups)
        batch = self.buffer.sample()
        if batch:
            self.checkpoints.wait()  # the update mutates the tensors a checkpoint may still be writing
            metrics.update(grpo_update(self.policy, batch, config))
        finished = time.perf_counter()
        tokens = sum(g.num_completion_tokens for g in groups)
        scored = [g for g in groups if g.dropped_by != "reward_error"]
        rewards = [r for g in scored for r in g.rewards]
        metrics.update({
            "reward/mean": sum(rewards) / max(1, len(rewards)),
            "time/generate": generated - started,
            "time/update": finished - generated,
            "time/step": finished - started,
            "perf/tokens_per_second": tokens / max(1e-9, finished - started),
        })
        by_family: dict[str, list[float]] = defaultdict(list)
        for group in scored:
            by_family[group.task.family].extend(group.rewards)
        metrics.update({f"reward/{name}": sum(v) / len(v) for name, v in by_family.items()})
        metrics.update({f"curriculum/share/{arm}": p for arm, p in self.curriculum.mix().items()})
        self.state.completion_tokens += tokens
        self.state.train_seconds += finished - started
        self._write_rollouts(groups)
        return metrics

    def _write_rollouts(self, groups: list[Group]) -> None:
        limit = self.config.logging.rollouts_per_step
        rows = [
            {"step": self.state.step + 1, "family": g.task.family, "level": g.task.level, "prompt": g.task.prompt,
             "answer": g.task.answer, "completion": s.text, "reward": s.reward, "finished": s.finished,
             "kept": g.kept, "filter": g.dropped_by or "kept"}
            for g in groups for s in g.samples
        ][:limit]
        with (self.run_dir / "rollouts.jsonl").open("a") as file:
            for row in rows:
                file.write(json.dumps(row) + "\n")

    # ---- the whole run ---------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        config, state = self.config, self.state
        run_started = time.perf_counter()
        sink = MultiSink(self.run_dir, config.logging.tensorboard, config.logging.wandb, config.logging.mlflow,
                         to_dict(config))
        say = print
        try:
            if state.eval_before is None:
                before = self._evaluate("before")
                state.eval_before = before.summary()
                state.evals.append({"step": 0, "accuracy": before.accuracy})
            say(f"held-out accuracy before training: {state.eval_before['accuracy']:.1%} "
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
                    progress.update(state.step, metrics["reward/mean"], metrics["perf/tokens_per_second"],
                                    self.curriculum.mix(), accuracy)
                    if state.step % config.train.checkpoint_every == 0 or state.step == config.train.steps:
                        state.wall_seconds += time.perf_counter() - run_started
                        run_started = time.perf_counter()
                        self._checkpoint()
            after = self._evaluate("after")
            state.evals.append({"step": state.step, "accuracy": after.accuracy})
            sink.log(state.step, {"eval/accuracy": after.accuracy})
            self.policy.export(self.run_dir / "model")
            state.wall_seconds += time.perf_counter() - run_started
            self._checkpoint()
            self.checkpoints.wait()
            summary = {
                "eval_before": state.eval_before, "eval_after": after.summary(), "steps": state.step,
                "wall_seconds": round(state.wall_seconds, 1), "train_seconds": round(state.train_seconds, 1),
                "completion_tokens": state.completion_tokens, "heldout_tasks": len(self.heldout),
                "model_dir": str(self.run_dir / "model"), "evals": state.evals,
            }
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        finally:
            sink.close()
            self.checkpoints.wait()
        from autotelic.report.html import write_report

        write_report(self.run_dir)
        say(f"held-out accuracy: before {state.eval_before['accuracy']:.1%} -> after {after.accuracy:.1%} "
            f"after {state.step} steps in {state.wall_seconds / 60:.1f} min; run directory {self.run_dir}")
        return summary


def _truncate_jsonl(path: Path, last_step: int) -> None:
    if not path.exists():
        return
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    kept = [line for line in rows if json.loads(line).get("step", 0) <= last_step]
    path.write_text("".join(line + "\n" for line in kept))


def train(config: RunConfig) -> dict[str, Any]:
    return Trainer(config, new_run_dir(config)).run()


def resume(run_dir: Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise TrainingError(f"{run_dir} is not a run directory (no config.yaml)")
    config = load_config(config_path, overrides)
    if overrides:
        save_config(config, config_path)
    return Trainer(config, run_dir, resume=True).run()
