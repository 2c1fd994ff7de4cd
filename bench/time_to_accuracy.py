"""Time to accuracy against TRL: the training seconds autotelic's default recipe needs to reach the held-out
accuracy TRL's GRPOTrainer ends with, both trained for the same wall-clock budget.

Both arms share the default recipe's model (the embedded SmolLM2-135M-Instruct, full fine-tuning), task mix (its
curriculum's families and levels), reward (each family's verifier) and held-out set (the Trainer's, which every
training draw excludes); ``--set key=value`` overrides the recipe for both.
- autotelic: ``autotelic.trainer.Trainer`` on the recipe, its steps run by this script;
- trl: TRL's GRPOTrainer (bench/trl_peer.py) on prompts drawn uniformly from the same families and levels by
  the recipe's curriculum code with ``curriculum.name=uniform`` (held-out tasks excluded), as chat messages
  (the same chat template as our policy), the verifiers as its reward, num_generations = generate.group_size,
  control.tasks_per_step prompts a step, control.max_new_tokens, generate.temperature, algorithm.lr (or
  --trl-lr) held constant as ours is (TRL's linear decay would follow the max_steps this bench has to make up),
  algorithm.beta, no gradient checkpointing (it saves memory this 135M model does not need by computing the
  forward pass twice); the rest TRL's defaults (loss dapo, fused AdamW, no top-k, like ours).

Clock: each arm's training seconds, from its first step's start (model load and setup excluded), evaluation
excluded. Held-out accuracy at 0 s, then after the first step that ends at or past each mark (every --every
seconds, or the marks --at lists), and
after the step that ends at or past --seconds, where the arm stops (so each overshoots by less than one of its
steps; the seconds reached are recorded). One evaluator for both: ``autotelic.trainer.evaluate_heldout`` (greedy,
strict 0/1 by the verifier) on an HFPolicy holding the arm's current weights (TRL's are copied into it).

Machine: each arm runs in its own child process under the process settings (bench/trl_peer.py). By default a
seed's two arms run one after the other with every core (autotelic first on even seeds, TRL first on odd ones);
with --parallel they run at once, each pinned to its own core with one torch thread, so both see the same
machine. Either way the budget binds both arms the same way only on an otherwise idle machine.

Result: per seed, each arm's curve; TRL's final accuracy (the target); the training seconds each arm needs to
reach it (the first evaluation at or above it, nothing interpolated); their ratio, TRL's over ours (a seed where
ours never reaches it counts 0; one where TRL's final accuracy is no better than the untrained model's has no
ratio). Across seeds: the median ratio and a 95% interval (t-interval over seeds of the log ratio, which is an
interval for the geometric mean); final accuracies compared with bench/stats.py (paired over held-out tasks).

    python bench/time_to_accuracy.py [--seconds 360] [--every 90 | --at 30,60,120] [--seeds 3] [--parallel] [--set key=value ...]

Cost: one held-out evaluation (192 tasks) took 48 s on one core of a busy two-core machine, and a TRL step of
8 x 8 completions takes about a minute on two cores; with --parallel on two idle cores the defaults should take
roughly 10 minutes a seed (an estimate, not yet a measurement).

Writes bench/results/time_to_accuracy-<UTC time>.json; the last line is time_to_accuracy_vs_trl=X.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import torch
from transformers import TrainerCallback

import artifacts  # bench/artifacts.py, stats.py and trl_peer.py: this script's directory is on sys.path
import stats
from trl_peer import PeerSettings, apply_process_settings, grpo_trainer
from autotelic.config import RunConfig
from autotelic.loading import load_config
from autotelic.run_evaluation import evaluate_heldout
from autotelic.trainer import Trainer
from autotelic.types import SHARE_PREFIX, Task

RECIPE = artifacts.REPO / "recipes" / "default.yaml"
ARMS = ("autotelic_default", "trl")


class Point(TypedDict):
    seconds: float  # training seconds when the evaluation started
    step: int
    accuracy: float


@dataclass(frozen=True)
class ArmSpec:
    """One arm of one seed, as the parent hands it to its child process."""

    arm: str
    seed: int
    seconds: float
    marks: list[float]
    overrides: list[str]
    trl_lr: float | None
    result: str  # where the child writes its ArmResult
    cpu: int | None = None  # --parallel: the one core the child runs on


@dataclass
class ArmResult:
    arm: str
    seed: int
    curve: list[Point] = field(default_factory=list)
    final_scores: list[float] = field(default_factory=list)  # per held-out task, at the last point
    heldout_uids: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    eval_seconds: float = 0.0
    torch_threads: int = 0
    cpus: list[int] = field(default_factory=list)
    # autotelic: what each step drew and earned (mean reward per family, the curriculum's shares, kept groups),
    # so that a seed that stalls can be read afterwards
    steps: list[dict[str, float]] = field(default_factory=list)


class Schedule:
    """When an arm evaluates: after the first step ending at or past each mark (training seconds), and at the end."""

    def __init__(self, marks: list[float], budget: float):
        self.marks, self.budget = sorted(mark for mark in marks if mark < budget), budget

    @classmethod
    def every(cls, interval: float, budget: float) -> Schedule:
        return cls([interval * k for k in range(1, math.ceil(budget / interval))], budget)

    def due(self, clock: float) -> bool:
        if clock >= self.budget:
            return True
        if not self.marks or clock < self.marks[0]:
            return False
        self.marks = [mark for mark in self.marks if mark > clock]  # a step that crosses two marks: one evaluation
        return True

    def over(self, clock: float) -> bool:
        return clock >= self.budget


class Evaluator:
    """The Trainer's held-out evaluation of ``policy``, appending each point to ``result``."""

    def __init__(self, trainer: Trainer, result: ArmResult):
        self.config, self.policy, self.heldout, self.result = trainer.config, trainer.policy, trainer.heldout, result
        result.heldout_uids = [task.uid for task in self.heldout]

    def __call__(self, clock: float, step: int) -> float:
        """Evaluate at ``clock`` training seconds, after ``step`` steps; the seconds it took."""
        started = time.perf_counter()
        evaluation = evaluate_heldout(self.config, self.policy, self.heldout)
        self.result.curve.append(Point(seconds=round(clock, 2), step=step, accuracy=evaluation.accuracy))
        self.result.final_scores = [float(record["correct"]) for record in evaluation.records]
        took = time.perf_counter() - started
        self.result.eval_seconds += took
        print(f"{self.result.arm} seed {self.result.seed}: {clock:6.1f} s, step {step:3d}: "
              f"{evaluation.accuracy:.1%} (eval {took:.1f} s)", file=sys.stderr, flush=True)
        return took


STEP_KEYS = ("reward/", SHARE_PREFIX, "filter/kept_groups", "filter/rounds")


def recipe(spec: ArmSpec, run_dir: Path, *extra: str) -> RunConfig:
    """The default recipe with the bench's overrides, the arm's seed and a scratch run directory."""
    return load_config(RECIPE, [*spec.overrides, f"train.seed={spec.seed}", f"logging.runs_dir={run_dir}",
                                "logging.progress=false", *extra])


def run_autotelic(spec: ArmSpec, run_dir: Path, result: ArmResult) -> None:
    """The Trainer's steps, timed one by one, evaluated on the schedule."""
    trainer = Trainer(recipe(spec, run_dir), run_dir)
    evaluate, schedule, clock = Evaluator(trainer, result), Schedule(spec.marks, spec.seconds), 0.0
    result.settings = {"recipe": str(RECIPE.relative_to(artifacts.REPO)), "overrides": spec.overrides}
    evaluate(0.0, 0)
    while not schedule.over(clock):
        started = time.perf_counter()
        metrics = trainer.step()
        clock += time.perf_counter() - started
        trainer.state.step += 1  # as Trainer.run counts them
        result.steps.append({"step": trainer.state.step, "seconds": round(clock, 2),
                             **{k: round(v, 4) for k, v in metrics.items() if k.startswith(STEP_KEYS)}})
        if schedule.due(clock):
            evaluate(clock, trainer.state.step)


def run_trl(spec: ArmSpec, run_dir: Path, result: ArmResult) -> None:
    """TRL's train(), timed and evaluated by a callback at the end of each step."""
    # not trained: the held-out set, a uniform curriculum over the recipe's families and levels that excludes
    # it, and the policy the evaluator reads TRL's weights from
    holder = Trainer(recipe(spec, run_dir, "curriculum.name=uniform"), run_dir)
    config = holder.config
    evaluate, schedule = Evaluator(holder, result), Schedule(spec.marks, spec.seconds)
    # a step takes over a second on a CPU: the budget ends before max_steps, each prompt seen once
    steps = math.ceil(spec.seconds)
    tasks: list[Task] = holder.curriculum.next_tasks(config.control.tasks_per_step * steps)
    settings = PeerSettings(prompts=config.control.tasks_per_step, group=config.generate.group_size,
                            new_tokens=config.control.max_new_tokens, lr=spec.trl_lr or config.algorithm.lr,
                            temperature=config.generate.temperature, top_p=config.generate.top_p, steps=steps,
                            seed=spec.seed,
                            beta=config.algorithm.beta, checkpointing=False, lr_schedule="constant")
    result.settings = {**asdict(settings), "overrides": spec.overrides}

    class Clock(TrainerCallback):
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            self.started, self.excluded = time.perf_counter(), 0.0

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            clock = time.perf_counter() - self.started - self.excluded
            if schedule.due(clock):
                copied = time.perf_counter()
                holder.policy.model.load_state_dict(model.state_dict())
                self.excluded += time.perf_counter() - copied + evaluate(clock, state.global_step)
            control.should_training_stop = schedule.over(clock)

    trainer = grpo_trainer(str(holder.policy.model_dir), tasks, settings, str(run_dir / "trl"), [Clock()],
                           config.model.system_prompt)
    evaluate(0.0, 0)
    trainer.train()


def child(spec: ArmSpec) -> None:
    """One arm in this process, under the process settings."""
    apply_process_settings()
    result = ArmResult(arm=spec.arm, seed=spec.seed, torch_threads=torch.get_num_threads(),
                       cpus=sorted(os.sched_getaffinity(0)))
    with tempfile.TemporaryDirectory() as out:
        (run_autotelic if spec.arm == "autotelic_default" else run_trl)(spec, Path(out), result)
    Path(spec.result).write_text(json.dumps(asdict(result)))


def start(spec: ArmSpec) -> subprocess.Popen:
    """The arm's child process, pinned to ``spec.cpu`` from its first instruction (a child inherits the CPU
    affinity of the thread that starts it); what it prints goes to stderr, leaving stdout to the report."""
    everywhere = os.sched_getaffinity(0)
    if spec.cpu is not None:
        os.sched_setaffinity(0, {spec.cpu})
    try:
        return subprocess.Popen([sys.executable, __file__, "--child", json.dumps(asdict(spec))], stdout=sys.stderr)
    finally:
        os.sched_setaffinity(0, everywhere)


def finish(process: subprocess.Popen, spec: ArmSpec) -> ArmResult:
    if process.wait() != 0:
        raise RuntimeError(f"{spec.arm} seed {spec.seed} failed (exit {process.returncode}); its output is above")
    return ArmResult(**json.loads(Path(spec.result).read_text()))


def run_seed(seed: int, args: argparse.Namespace, scratch: Path) -> dict[str, ArmResult]:
    """Both arms of one seed: at once on two cores (--parallel), else one after the other, alternating."""
    cpus = sorted(os.sched_getaffinity(0))
    if args.parallel and len(cpus) < 2:
        raise SystemExit("--parallel needs two cores to pin the arms to")
    specs = [ArmSpec(arm, seed, args.seconds, marks(args), args.set, args.trl_lr, str(scratch / f"{arm}-{seed}.json"),
                     cpus[index] if args.parallel else None) for index, arm in enumerate(ARMS)]
    if args.parallel:
        running = [(start(spec), spec) for spec in specs]
        return {spec.arm: finish(process, spec) for process, spec in running}
    order = specs if seed % 2 == 0 else specs[::-1]
    return {spec.arm: finish(start(spec), spec) for spec in order}


def marks(args: argparse.Namespace) -> list[float]:
    """--at's marks, else every --every seconds."""
    if args.at:
        return [float(mark) for mark in args.at.split(",")]
    return Schedule.every(args.every, args.seconds).marks


def seconds_to_reach(curve: list[Point], target: float) -> float | None:
    """Training seconds of the first evaluation at or above ``target``; None if none is."""
    return next((point["seconds"] for point in curve if point["accuracy"] >= target), None)


def seed_ratio(trl: ArmResult, ours: ArmResult) -> dict[str, Any]:
    """TRL's final accuracy, the seconds each arm needs to reach it, and TRL's seconds over ours."""
    target = trl.curve[-1]["accuracy"]
    trl_seconds, our_seconds = seconds_to_reach(trl.curve, target), seconds_to_reach(ours.curve, target)
    if trl_seconds == 0:
        ratio, note = None, "TRL ended no better than the untrained model: nothing to reach"
    elif our_seconds is None:
        ratio, note = 0.0, f"autotelic never reached it in {ours.curve[-1]['seconds']:.0f} s: counted 0"
    else:
        ratio, note = trl_seconds / our_seconds, ""
    return {"seed": trl.seed, "target": target, "trl_seconds": trl_seconds, "autotelic_seconds": our_seconds,
            "ratio": ratio, "note": note}


def ratio_summary(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of the seeds' ratios; a 95% t-interval of their geometric mean where every one is positive."""
    ratios = [entry["ratio"] for entry in per_seed if entry["ratio"] is not None]
    median = statistics.median(ratios) if ratios else None  # unrounded: the printed line rounds it once
    ci = None
    if len(ratios) >= 2 and min(ratios) > 0:
        lo, hi = stats.t_interval([math.log(r) for r in ratios])
        ci = [round(math.exp(lo), 3), round(math.exp(hi), 3)]
    return {"median": median, "ci95_geometric_mean": ci, "seeds_with_ratio": len(ratios),
            "seeds": len(per_seed)}


def show_curve(result: ArmResult) -> str:
    return "  ".join(f"{p['seconds']:.0f}s/{p['step']}:{p['accuracy']:.1%}" for p in result.curve)


def report(results: list[dict[str, ArmResult]], args: argparse.Namespace, wall: float) -> tuple[Path, str]:
    """Print per seed and across seeds, write the artifact; its path and the last line."""
    per_seed = []
    for by_arm in results:
        if by_arm["trl"].heldout_uids != by_arm["autotelic_default"].heldout_uids:
            raise RuntimeError("the arms were evaluated on different held-out sets")
        entry = seed_ratio(by_arm["trl"], by_arm["autotelic_default"])
        per_seed.append(entry)
        for result in by_arm.values():
            print(f"seed {result.seed} {result.arm:17s} {show_curve(result)}")
        reached = {arm: "never" if s is None else f"{s:.0f} s" for arm, s in
                   (("trl", entry["trl_seconds"]), ("autotelic", entry["autotelic_seconds"]))}
        ratio = "none" if entry["ratio"] is None else f"{entry['ratio']:.2f}"
        print(f"seed {entry['seed']}: TRL's final {entry['target']:.1%} reached by TRL at {reached['trl']}, "
              f"by autotelic at {reached['autotelic']}: ratio {ratio} {entry['note']}")
    scores = {arm: [by_arm[arm].final_scores for by_arm in results] for arm in ARMS}
    comparison = stats.compare("final held-out accuracy, autotelic_default - trl, same training seconds",
                               scores["trl"], scores["autotelic_default"])
    finals = {arm: stats.mean_ci([statistics.fmean(task) for task in zip(*scores[arm])]) for arm in ARMS}
    summary = {"per_seed": per_seed, "ratio": ratio_summary(per_seed), "seconds": args.seconds, "marks": marks(args),
               "mode": "parallel, one core each" if args.parallel else "sequential, every core each",
               "final_accuracy": {arm: {"mean": round(finals[arm][0], 4), "ci95": [round(b, 4) for b in finals[arm][1]]}
                                  for arm in ARMS},
               "wall_seconds": round(wall, 1),
               "interval": "ratio: 95% t-interval over seeds of the log ratio (geometric mean); final accuracy: "
                           "bootstrap over held-out tasks of their mean over seeds; gain: bench/stats.py compare "
                           "(paired bootstrap over tasks, t over seeds)"}
    for arm in ARMS:
        mean, (lo, hi) = finals[arm]
        print(f"final accuracy {arm}: {mean:.1%} (95% CI {lo:.1%}-{hi:.1%}, bootstrap over held-out tasks)")
    print(f"gain {comparison['gain_points']:+.1f} points (95% CI {comparison['ci95'][0]:+.1f} to "
          f"{comparison['ci95'][1]:+.1f}; {comparison['seeds']} seeds x {comparison['heldout_n']} tasks)")
    rows = [{**asdict(result), "final_accuracy": statistics.fmean(result.final_scores)}
            for by_arm in results for result in by_arm.values()]
    path = artifacts.write("time_to_accuracy", rows, [comparison], summary=summary, directory=args.results)
    ratio = summary["ratio"]
    ci = "" if ratio["ci95_geometric_mean"] is None else \
        f", 95% CI of the geometric mean {ratio['ci95_geometric_mean'][0]:.2f}-{ratio['ci95_geometric_mean'][1]:.2f}"
    median = math.nan if ratio["median"] is None else ratio["median"]
    last = (f"time_to_accuracy_vs_trl={median:.2f}  (median over {ratio['seeds_with_ratio']} of "
            f"{ratio['seeds']} seeds{ci}; {summary['mode']}, {args.seconds:.0f} training seconds per arm)")
    return path, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=360, help="training seconds per arm and seed")
    parser.add_argument("--every", type=float, default=90, help="evaluate every this many training seconds")
    parser.add_argument("--at", help="evaluate at these training seconds instead, e.g. 30,60,120,240 (finer where "
                                         "the faster arm crosses the target: it bounds the ratio's resolution)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--parallel", action="store_true", help="a seed's arms at once, one core each")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override for both arms (repeatable)")
    parser.add_argument("--trl-lr", type=float, help="TRL's learning rate (default: the recipe's algorithm.lr)")
    parser.add_argument("--results", type=Path, default=artifacts.RESULTS, help="where the artifact goes")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: one arm's process
    args = parser.parse_args()
    if args.child:
        return child(ArmSpec(**json.loads(args.child)))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        results = [run_seed(seed, args, Path(scratch)) for seed in range(args.seeds)]
    path, last = report(results, args, time.perf_counter() - started)
    print(f"artifact: {path}")
    print(last)


if __name__ == "__main__":
    main()
