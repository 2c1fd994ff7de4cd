"""Live progress bar: step, mean reward, held-out accuracy, curriculum mix, tokens/s, ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)


def top_arms(mix: dict[str, float], k: int = 3) -> str:
    best = sorted(mix.items(), key=lambda item: -item[1])[:k]
    return " ".join(f"{name}:{share:.0%}" for name, share in best)


class ProgressDisplay:
    def __init__(self, total_steps: int, start_step: int, accuracy: float | None = None, enabled: bool = True):
        self.progress = Progress(
            TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(bar_width=20),
            TextColumn("reward {task.fields[reward]}"), TextColumn("eval {task.fields[accuracy]}"),
            TextColumn("{task.fields[tok_s]} tok/s"), TextColumn("mix {task.fields[mix]}"),
            TimeRemainingColumn(), console=Console(stderr=True), disable=not enabled,
        )
        self.task = self.progress.add_task("train", total=total_steps, completed=start_step, reward="-",
                                           accuracy="-" if accuracy is None else f"{accuracy:.1%}", tok_s="-", mix="-")

    def __enter__(self) -> "ProgressDisplay":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, step: int, reward: float, tokens_per_second: float, mix: dict[str, float],
               accuracy: float | None = None) -> None:
        fields = dict(reward=f"{reward:.2f}", tok_s=f"{tokens_per_second:.0f}", mix=top_arms(mix))
        if accuracy is not None:
            fields["accuracy"] = f"{accuracy:.1%}"
        self.progress.update(self.task, completed=step, **fields)

    def print(self, message: str) -> None:
        self.progress.console.print(message)
