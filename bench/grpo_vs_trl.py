"""Seconds per GRPO step: TRL's GRPOTrainer vs autotelic, same config, same process, same settings.

Config (the core issue's reference): the embedded SmolLM2-135M-Instruct, 8 prompts x 4 samples, 24 new tokens,
temperature 1, lr 1e-5, no KL, single-digit addition with the strict first-integer reward, full fine-tuning.
Arms:
- trl_default: TRL's GRPOTrainer at its documented defaults (gradient checkpointing on, loss "dapo", ...), only the
  config above set (batch, group, lengths, lr, beta, temperature; fp32 on the CPU);
- trl_no_checkpointing: the same with gradient_checkpointing=False;
- autotelic_all_groups: every group trained on, as TRL does: the same work per step;
- autotelic_checkpointing: the same with model.gradient_checkpointing=true, like TRL's default;
- autotelic_default: autotelic's default pipeline, which skips the update of groups whose rewards do not vary;
- autotelic_lora: LoRA r=32, lr 4e-4 (recipes/lora.yaml), for reference.

Fairness: the process-wide settings autotelic's policy applies (torch threads = the cores we may use, glibc
keeping freed memory, denormals flushed) are applied first, before any arm exists, so every arm and every thread
it starts runs under them (each arm's torch worker threads are started by its own thread, after them). Each arm
runs in its own thread, since TRL's train() owns its loop and a thread can pause it between steps unchanged, but
only one arm runs at a time: the main thread hands each one step in turn, in a fresh random order every round, so
a drift in the machine's speed falls on every arm alike. The first round (model load, warm-up step) is not timed;
each timed step is the wall time of one handed-out step, TRL's logging and batch fetch included. Peak RSS:
getrusage's maximum is per process, so each arm first runs alone in a child process with the same settings (model
load, warm-up and one step, whose time is printed as "alone" to cross-check the interleaved medians).

    python bench/grpo_vs_trl.py [--steps 5]

Writes bench/results/grpo_vs_trl-<UTC time>.json. The last two lines: same_work_vs_trl=X (faster TRL arm's
median s/step over autotelic_all_groups') and speedup_vs_trl=Y (the same over autotelic_default's).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

import artifacts  # bench/artifacts.py, stats.py and trl_peer.py: this script's directory is on sys.path
import stats
from trl_peer import PeerSettings, apply_process_settings, grpo_trainer
from autotelic.backends.embedded import embedded_model_dir
from autotelic.backends.memory import peak_rss_mib
from autotelic.loading import load_config
from autotelic.tasks import task_uid
from autotelic.trainer import Trainer
from autotelic.types import Task

PROMPTS, GROUP, NEW_TOKENS, LR = 8, 4, 24, 1e-5
ALONE_STEPS = 2  # warm-up and one step: the optimizer state exists from the first update on

Pause = Callable[[], None]  # an arm calls it after every step and resumes when handed its next one


def denormals_flushed() -> bool:
    """True where this thread and its torch worker threads flush denormals (the x86 flags are per thread);
    the tensor is large enough for torch to split the product across its threads."""
    return bool(torch.full((1 << 20,), 1e-40).mul(1.0).eq(0).all())


def addition_tasks(count: int, seed: int = 0) -> list[Task]:
    """Single-digit additions, scored by the add family's strict first-integer verifier."""
    rng = random.Random(seed)
    pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(count)]
    prompts = [f"What is {a} + {b}? Reply with only the number." for a, b in pairs]
    return [Task(prompt=prompt, answer=str(a + b), family="add", level=1, uid=task_uid("add", prompt))
            for prompt, (a, b) in zip(prompts, pairs)]


def trl_arm(steps: int, checkpointing: bool | None) -> Callable[[Pause, dict], None]:
    """TRL's GRPOTrainer.train(), unmodified, pausing after each optimizer step. ``None``: TRL's default."""
    def body(pause: Pause, row: dict) -> None:
        from transformers import TrainerCallback

        class Handoff(TrainerCallback):
            def on_step_end(self, *args, **kwargs):
                row["groups_trained"].append(PROMPTS)
                pause()

        settings = PeerSettings(prompts=PROMPTS, group=GROUP, new_tokens=NEW_TOKENS, lr=LR, temperature=1.0,
                                steps=steps, checkpointing=checkpointing)
        with tempfile.TemporaryDirectory() as out:
            trainer = grpo_trainer(str(embedded_model_dir()), addition_tasks(PROMPTS * steps), settings, out,
                                   [Handoff()])
            row["gradient_checkpointing"] = trainer.args.gradient_checkpointing
            trainer.train()
    return body


def autotelic_arm(steps: int, overrides: list[str]) -> Callable[[Pause, dict], None]:
    def body(pause: Pause, row: dict) -> None:
        with tempfile.TemporaryDirectory() as out:
            config = load_config(None, [
                "curriculum.families=[add]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1",
                f"control.tasks_per_step={PROMPTS}", f"generate.group_size={GROUP}",
                f"control.max_new_tokens={NEW_TOKENS}", "generate.temperature=1.0", f"logging.runs_dir={out}",
                *overrides,
            ])
            trainer = Trainer(config, Path(out))
            for _ in range(steps):
                row["groups_trained"].append(int(trainer.step().get("filter/kept_groups", PROMPTS)))
                pause()
    return body


def arms(steps: int) -> dict[str, Callable[[Pause, dict], None]]:
    full = ["model.lora=false", f"algorithm.lr={LR}"]
    return {
        "trl_default": trl_arm(steps, None),
        "trl_no_checkpointing": trl_arm(steps, False),
        "autotelic_all_groups": autotelic_arm(steps, [*full, "filter.drop_zero_variance=false"]),
        "autotelic_checkpointing": autotelic_arm(steps, [*full, "filter.drop_zero_variance=false",
                                                         "model.gradient_checkpointing=true"]),
        "autotelic_default": autotelic_arm(steps, full),
        "autotelic_lora": autotelic_arm(steps, ["model.lora=true", "algorithm.lr=4e-4"]),
    }


class Arm:
    """One trainer in its own thread that runs only while the main thread waits on it: never two at once."""

    def __init__(self, name: str, body: Callable[[Pause, dict], None]):
        self.name = name
        self.row: dict = {"arm": name, "seed": 0, "groups_trained": []}
        self._go, self._done = threading.Semaphore(0), threading.Semaphore(0)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(body,), name=name, daemon=True)
        self._thread.start()

    def _run(self, body: Callable[[Pause, dict], None]) -> None:
        self._go.acquire()
        self.row["denormals_flushed"] = denormals_flushed()
        try:
            body(self._pause, self.row)
        except BaseException as error:  # re-raised in the main thread by advance()
            self._error = error
        self._done.release()

    def _pause(self) -> None:
        self.row["torch_threads"] = torch.get_num_threads()
        self._done.release()
        self._go.acquire()

    def advance(self) -> float:
        """Run the arm up to its next pause (or its end); the wall seconds it took."""
        started = time.perf_counter()
        self._go.release()
        self._done.acquire()
        if self._error is not None:
            raise RuntimeError(f"arm {self.name} failed") from self._error
        return time.perf_counter() - started

    def finish(self) -> None:
        self.advance()
        self._thread.join()


def run_alone(name: str) -> dict[str, float]:
    """This arm alone in a fresh process with the same settings: ``ru_maxrss`` is then the arm's own. Its
    second step's time, with no other arm in the process, cross-checks the interleaved medians."""
    result = subprocess.run([sys.executable, __file__, "--alone", name], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{name} alone failed:\n{result.stderr[-3000:]}")
    return {key: float(value) for key, value in (item.split("=") for item in result.stdout.split()[-2:])}


def alone_child(name: str) -> None:
    apply_process_settings()
    arm = Arm(name, arms(ALONE_STEPS)[name])
    took = [arm.advance() for _ in range(ALONE_STEPS)]
    arm.finish()
    print(f"peak_rss_mib={peak_rss_mib():.0f}",
          f"alone_step_seconds={took[-1]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per arm, after one warm-up step")
    parser.add_argument("--seed", type=int, default=0, help="the random order of the arms in each round")
    parser.add_argument("--alone", help=argparse.SUPPRESS)  # internal: the child process of run_alone
    args = parser.parse_args()
    if args.alone:
        return alone_child(args.alone)
    apply_process_settings()
    started = time.perf_counter()
    # children first, while this process is small: the arms' models and optimizers, about 2 GB each, all at once
    alone = {}
    for name in arms(1):
        alone[name] = run_alone(name)
        print(f"alone {name}: {alone[name]}", file=sys.stderr, flush=True)
    running = [Arm(name, body) for name, body in arms(1 + args.steps).items()]
    order = random.Random(args.seed)
    seconds: dict[str, list[float]] = {arm.name: [] for arm in running}
    for round_index in range(1 + args.steps):
        for arm in order.sample(running, len(running)):
            took = arm.advance()
            print(f"round {round_index} {arm.name}: {took:.2f} s", file=sys.stderr, flush=True)
            if round_index:
                seconds[arm.name].append(took)
    for arm in running:
        arm.finish()

    rows = []
    for arm in running:
        arm.row.update(step_seconds=[round(s, 3) for s in seconds[arm.name]], timing=stats.timing(seconds[arm.name]),
                       **alone[arm.name])
        rows.append(arm.row)
        t = arm.row["timing"]
        print(f"{arm.name:22s} median {t['median']:6.2f} s/step  IQR {t['q1']:.2f}-{t['q3']:.2f}  "
              f"range {t['min']:.2f}-{t['max']:.2f}  (n={t['n']})  alone {alone[arm.name]['alone_step_seconds']:.2f}  "
              f"peak RSS {alone[arm.name]['peak_rss_mib']:,.0f} MiB")
    trl = min(("trl_default", "trl_no_checkpointing"), key=lambda name: stats.timing(seconds[name])["median"])
    print(f"faster TRL arm: {trl}")
    ratios = {}
    for key, ours in (("same_work_vs_trl", "autotelic_all_groups"), ("speedup_vs_trl", "autotelic_default")):
        value, (lo, hi) = stats.ratio_of_medians(seconds[trl], seconds[ours], seed=args.seed)
        ratios[key] = {"value": round(value, 3), "ci95": [round(lo, 3), round(hi, 3)], "numerator": trl,
                       "denominator": ours, "rounds": args.steps}
    path = artifacts.write("grpo_vs_trl", rows, [], summary={
        "faster_trl": trl, "ratios": ratios, "wall_seconds": round(time.perf_counter() - started, 1),
        "interval": "95% paired bootstrap over rounds of the ratio of medians"})
    print(f"artifact: {path}")
    for key, ratio in ratios.items():  # last, as the issue asks: identical work, then the default pipeline
        print(f"{key}={ratio['value']:.2f}  (95% CI {ratio['ci95'][0]:.2f}-{ratio['ci95'][1]:.2f}, "
              f"{trl} / {ratio['denominator']}, medians of {args.steps} interleaved steps)")


if __name__ == "__main__":
    main()
