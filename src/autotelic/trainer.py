"""The training loop: each step draws rollouts through the four stages (curriculum -> Generate -> Filter ->
Control -> Replay, rollout/pipeline.py), updates every agent on its own groups, logs, and every
``checkpoint_every`` steps writes a checkpoint ``autotelic resume`` continues from exactly. Its parts live
next door: ``checks.py`` (what is wrong with a config), ``build.py`` (the parts from the config), ``update.py``
(the loss), ``run_evaluation.py``, ``run_log.py`` and ``run_state.py`` (checkpoints, the run directory).
"""

from __future__ import annotations

import copy
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autotelic.abilities import Stateful, shut_down
from autotelic.backends.hf import HFPolicy
from autotelic.backends.memory import memory_metrics, warn_if_short
from autotelic.build import (build_agents, build_evolver, build_generation, build_pipeline, build_train_group,
                             plan_run)
from autotelic.checks import check_run
from autotelic.config import RunConfig, save_config, to_dict
from autotelic.curricula.evolve import EvolvingPromptPool
from autotelic.divergence import DivergenceGuard
from autotelic.guardrails import Guardrails
from autotelic.interrupt import CtrlC
from autotelic.loading import load_config
from autotelic.report.progress import ProgressDisplay
from autotelic.report.sinks import MultiSink
from autotelic.rollout.asynchronous import RolloutSchedule
from autotelic.run_evaluation import RunEvaluation
from autotelic.run_log import group_metrics, worker_metrics, worker_pools, write_step_logs
from autotelic.run_state import RunCheckpoints, TrainState, load_payload, new_run_dir, run_config_path
from autotelic.stopping import STOPS, stopped
from autotelic.types import Group
from autotelic.update import RoleBaselines, dataset_pairs, dpo_update, train_on_groups

if TYPE_CHECKING:
    from autotelic.dist.fsdp import FSDPTrainGroup


class Trainer:
    """Owns the run directory, the policy and the four stages; ``run()`` trains to the end."""

    def __init__(self, config: RunConfig, run_dir: Path, resume: bool = False,
                 after_step: Callable[[int, dict[str, float]], bool] | None = None):
        plan = plan_run(config)
        self.spec, self.isolation, self.pairs = plan.spec, plan.isolation, plan.pairs
        self.heldout, self.curriculum = plan.heldout, plan.curriculum
        self.after_step = after_step  # sees each step's metrics; True ends the run (the Python API's callbacks)
        self.config, self.run_dir = config, run_dir
        self.evaluation = RunEvaluation(config, self.heldout, run_dir, self.curriculum)
        self.baselines = RoleBaselines(config.algorithm.rae_decay) if self.spec.advantage == "rae" else None
        self.guardrails = Guardrails.for_run(config)
        self.agents = build_agents(config)  # the models load last: bad settings fail before they are read
        self.policy = self.agents[0]
        self.guard = DivergenceGuard(self.agents, config.algorithm.lr)
        if isinstance(self.curriculum, EvolvingPromptPool):
            self.curriculum.attach(*build_evolver(config, self.policy, self.spec))
        self.generation = build_generation(config, self.policy)
        self.pipeline = build_pipeline(config, self.policy, self.curriculum, self.heldout, self.agents, self.generation)
        warn_if_short(config, self.agents)  # every model is loaded by now: judges, evolver, roles
        self.train_group = build_train_group(config, self.spec) if config.dist.train_workers else None
        if self.train_group is not None:  # the ranks built the same initial weights: the driver follows them
            self._follow_train_group()
        self.checkpoints = RunCheckpoints(run_dir, config.train.keep_checkpoints)
        self.state = TrainState()
        self.rollouts = RolloutSchedule(self.pipeline, self.policy, self.generation, config.dist.async_steps,
                                        config.train.steps)
        if resume:
            self.checkpoints.restore(self._load)
        else:
            save_config(config, run_dir / "config.yaml")

    # ---- checkpoints -----------------------------------------------------------------------
    def _stateful_parts(self) -> dict[str, Stateful]:
        parts = {"curriculum": self.curriculum, "replay": self.pipeline.replay,
                 "pending_rollouts": self.pipeline.generator, "role_baselines": self.baselines,
                 "guardrails": self.guardrails, "divergence": self.guard}
        return {name: part for name, part in parts.items() if isinstance(part, Stateful)}

    def _checkpoint(self) -> None:
        with self.rollouts.paused() as queued:  # curriculum, replay and the rollouts collected ahead agree
            extra: dict[str, Any] = {"queued_rollouts": copy.deepcopy(queued)}
            if self.train_group is not None:  # the driver follows the ranks' weights; their optimizer is theirs
                extra["optimizer"] = self.train_group.optimizer_state()
            self.checkpoints.save(self.state, self.agents, self._stateful_parts(), extra)

    def _load(self, payload: dict[str, Any]) -> None:
        if self.train_group is not None:
            self.train_group.load_state_dict(payload)
            payload = {**payload, "optimizer": self.policy.optimizer.state_dict()}  # the ranks hold the real one
        self.state = load_payload(payload, self.agents, self._stateful_parts())
        self.rollouts.queued = payload.get("queued_rollouts", [])

    # ---- one step --------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        started = time.perf_counter()
        if self.pairs is not None:
            return self._offline_dpo_step(started)
        with self.guard.generating(self.state.step):  # on the weights of the last step
            rollouts, metrics = self.rollouts.next(self.state.step)
        generated = time.perf_counter()
        self.guard.before_update(rollouts.batch, self.state.step)
        if rollouts.batch:
            self.checkpoints.wait()  # the update mutates the tensors a checkpoint may still be writing
        trained = False
        try:
            for index, agent in enumerate(self.agents):  # each agent learns from its own groups only
                batch = [g for g in rollouts.batch if g.agent == index]
                if batch and not agent.frozen:
                    update = self._update(agent, batch)
                    self.guard.after_update(index, batch, update)
                    metrics.update(update if len(self.agents) == 1
                                   else {f"agent{index}/{k}": v for k, v in update.items()})
            trained = True
        finally:
            self.rollouts.step_done(trained)
        finished = time.perf_counter()
        groups = rollouts.groups
        tokens = sum(g.num_completion_tokens for g in groups)
        seconds = finished - started
        metrics.update({"time/rollout": generated - started, "time/update": finished - generated, "time/step": seconds,
                        "perf/tokens_per_second": tokens / max(1e-9, seconds), **group_metrics(groups),
                        **worker_metrics(self.pipeline.generator, self.pipeline.scorer, self.config.dist.env_workers)})
        self.guardrails.observe(self.state.step + 1, groups, metrics)
        self.state.completion_tokens += tokens
        self.state.train_seconds += seconds
        write_step_logs(self.run_dir, groups, self.state.step + 1, self.config.logging.rollouts_per_step,
                        self.curriculum)
        return metrics

    def _follow_train_group(self) -> None:  # the driver's policy takes the ranks' weights (to evaluate, export)
        self.policy.load_trainable_state(self.train_group.trainable_state())
        self.policy.version = self.train_group.version

    def _on_ranks(self, update: Callable[[FSDPTrainGroup], dict[str, float]]) -> dict[str, float]:
        try:
            return update(self.train_group)
        finally:  # a skipped step changed nothing, but the versions must still agree
            self._follow_train_group()

    def _update(self, policy: HFPolicy, batch: list[Group]) -> dict[str, float]:
        config = self.config
        if self.train_group is not None:
            return self._on_ranks(lambda ranks: ranks.update(batch, config.generate.temperature,
                                                             config.control.max_new_tokens))
        return train_on_groups(policy, batch, self.spec, config.algorithm, config.generate.temperature,
                               config.control.max_new_tokens, self.baselines)

    def _offline_dpo_step(self, started: float) -> dict[str, float]:
        """Offline DPO: the next ``tasks_per_step`` pairs of the dataset (reshuffled every epoch)."""
        count = self.config.control.tasks_per_step
        batch = dataset_pairs(self.pairs, self.state.pairs_seen, count, self.config.train.seed, self.policy)
        self.checkpoints.wait()
        metrics = (self._on_ranks(lambda ranks: ranks.update_pairs(batch)) if self.train_group is not None
                   else dpo_update(self.policy, batch, self.config.algorithm))
        self.state.pairs_seen += count
        seconds = time.perf_counter() - started
        self.state.train_seconds += seconds
        return {**metrics, "time/step": seconds, "time/update": seconds,
                "reward/mean": metrics.get("train/reward_accuracy", 0.0), "perf/tokens_per_second": 0.0}

    def run(self) -> dict[str, Any]:
        config, state = self.config, self.state
        run_started = time.perf_counter()
        sandbox = {"sandbox": self.isolation} if self.isolation else {}  # where model-written code ran
        sink = MultiSink(self.run_dir, config.logging.tensorboard, config.logging.wandb, config.logging.mlflow,
                         to_dict(config), {**sandbox, "heldout_kind": self.heldout.kind})  # what each row measures
        say = print
        try:
            print(*self.evaluation.before(state, self.agents), sep="\n")
            with CtrlC() as ctrl_c, ProgressDisplay(config.train.steps, state.step, state.evals[-1]["accuracy"],
                                                    config.logging.progress) as progress:
                say = progress.print
                while state.step < config.train.steps:
                    if config.train.max_minutes is not None and state.train_seconds > 60 * config.train.max_minutes:
                        say(f"train.max_minutes={config.train.max_minutes} reached after {state.step} steps")
                        break
                    metrics = self.step()
                    state.step += 1
                    self.guard.settle(state.step)  # the weights are this step's: a failure after it applied nothing
                    if config.eval.every and state.step % config.eval.every == 0 and state.step < config.train.steps:
                        accuracy = self.evaluation.accuracy(f"step{state.step}", self.policy).accuracy
                        metrics["eval/accuracy"] = accuracy
                        state.evals.append({"step": state.step, "accuracy": accuracy})
                    sink.log(state.step, {**metrics, **memory_metrics(config.model.device)})
                    progress.update(state.step, metrics, self.guardrails.raised)
                    asked_to_stop = self.after_step is not None and self.after_step(state.step, metrics)
                    if state.step % config.train.checkpoint_every == 0 or state.step == config.train.steps:
                        state.wall_seconds += time.perf_counter() - run_started
                        run_started = time.perf_counter()
                        self._checkpoint()
                    if asked_to_stop:
                        say(f"stopped by a callback after {state.step} steps")
                        break
                    ctrl_c.check()  # Ctrl-C: a finished step, checkpointed below
            self.rollouts.stop()  # rollouts collected for steps past a time limit wait in the last checkpoint
            with self.guard.generating(state.step):
                after, mode_summary = self.evaluation.after(state, self.agents)
            if config.train.export_model:
                self.policy.export(self.run_dir / "model")
                for index, agent in enumerate(self.agents[1:], 1):
                    agent.export(self.run_dir / "agents" / str(index))
            state.wall_seconds += time.perf_counter() - run_started
            self._checkpoint()
            self.checkpoints.wait()
            # logged after the last checkpoint, which a resume would otherwise log again
            sink.log(state.step, {"eval/accuracy": after.accuracy})
            value = ({"value": self.evaluation.value_stage(self.policy, self.pipeline.scorer, say)}
                     if config.value.enabled else {})  # the trained policy is safe by now
            summary = self.evaluation.summary(state, after, {**sandbox, **value, **mode_summary,
                                                             "guardrail_alarms": self.guardrails.alarms})
        except STOPS as error:  # one line; the run directory resumable from the checkpoint it names
            raise stopped(error, state.step, self.guard, self.checkpoints, self._checkpoint) from None
        finally:
            self.rollouts.stop()
            sink.close()
            self.checkpoints.wait()
            shut_down([*worker_pools(self.pipeline.generator, self.pipeline.scorer).values(), self.train_group])
        if config.logging.report:
            from autotelic.report.html import write_report  # matplotlib loads only here
            write_report(self.run_dir)
        for line in self.evaluation.closing(state, summary):
            say(line)
        return summary


def train(config: RunConfig, after_step: Callable[[int, dict[str, float]], bool] | None = None) -> dict[str, Any]:
    check_run(config)  # a bad setting stops before the run directory exists
    run_dir = new_run_dir(config)
    was_empty = not any(run_dir.iterdir())
    try:
        trainer = Trainer(config, run_dir, after_step=after_step)
    except BaseException:  # e.g. damaged weights: no half-made run is left to resume
        if was_empty:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return trainer.run()


def resume(run_dir: Path, overrides: list[str] | tuple[str, ...] = (),
           after_step: Callable[[int, dict[str, float]], bool] | None = None) -> dict[str, Any]:
    config_path = run_config_path(run_dir)
    config = load_config(config_path, overrides)
    trainer = Trainer(config, run_dir, resume=True, after_step=after_step)
    if overrides:  # the run's config changes only once the overrides proved to work with its checkpoint
        save_config(config, config_path)
    return trainer.run()
