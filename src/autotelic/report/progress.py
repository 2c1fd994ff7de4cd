"""Progress of a run: a live bar (step, mean reward, held-out accuracy, curriculum mix, tokens/s, ETA) on a
terminal; one plain line per step where the output goes to a file or a CI log, which a bar would garble."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from autotelic.types import SHARE_PREFIX


def top_arms(mix: dict[str, float], k: int = 3) -> str:
    best = sorted(mix.items(), key=lambda item: -item[1])[:k]
    return " ".join(f"{name}:{share:.0%}" for name, share in best)


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``: short enough for a log line."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ProgressDisplay:
    def __init__(self, total_steps: int, start_step: int, accuracy: float | None = None, enabled: bool = True):
        console = Console(stderr=True)
        self.total, self.start_step = total_steps, start_step
        self.terminal, self.lines = console.is_terminal, enabled and not console.is_terminal
        self.started = time.perf_counter()
        self.progress = Progress(
            TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(bar_width=20),
            TextColumn("reward {task.fields[reward]}"), TextColumn("eval {task.fields[accuracy]}"),
            TextColumn("{task.fields[tok_s]} tok/s"), TextColumn("mix {task.fields[mix]}"),
            TimeRemainingColumn(), console=console, disable=not enabled or not self.terminal,
        )
        self.task = self.progress.add_task("train", total=total_steps, completed=start_step, reward="-",
                                           accuracy="-" if accuracy is None else f"{accuracy:.1%}", tok_s="-", mix="-")

    def __enter__(self) -> "ProgressDisplay":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, step: int, metrics: dict[str, float], notes: Sequence[str] = ()) -> None:
        """Shows the step's mean reward, tokens/s, curriculum mix and held-out accuracy (where it evaluated), then
        ``notes`` (e.g. guardrail alarms), a line each."""
        reward, accuracy = metrics["reward/mean"], metrics.get("eval/accuracy")
        mix = {k[len(SHARE_PREFIX):]: v for k, v in metrics.items() if k.startswith(SHARE_PREFIX)}
        fields = dict(reward=f"{reward:.2f}", tok_s=f"{metrics['perf/tokens_per_second']:.0f}", mix=top_arms(mix))
        if accuracy is not None:
            fields["accuracy"] = f"{accuracy:.1%}"
        self.progress.update(self.task, completed=step, **fields)
        if self.lines:
            self.print(self.line(step, reward, accuracy))
        for note in notes:
            self.print(note)

    def line(self, step: int, reward: float, accuracy: float | None) -> str:
        """``step 3/20  reward 0.41  eval 52.0%  4.1 s/step  ETA 1m10s`` (eval only on steps that evaluated)."""
        per_step = (time.perf_counter() - self.started) / max(1, step - self.start_step)  # steps of this process
        evaluated = f"  eval {accuracy:.1%}" if accuracy is not None else ""
        return (f"step {step}/{self.total}  reward {reward:.2f}{evaluated}  {per_step:.1f} s/step  "
                f"ETA {duration(per_step * (self.total - step))}")

    def print(self, message: str) -> None:
        if not self.terminal:  # unwrapped and unstyled: a log keeps each message on its own line
            print(message, file=sys.stderr, flush=True)
        else:
            self.progress.console.print(message)
