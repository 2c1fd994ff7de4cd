"""How a run stops when it cannot go on: a divergence (divergence.py), a ``TrainingError`` raised inside a step (a
user's reward function failing, ...), or Ctrl-C (interrupt.py). Each stops with one line and leaves a run
directory that ``autotelic resume`` continues: where nothing of the step in progress changed the weights, a
checkpoint of the last finished step exists or is written now; otherwise (part of an update applied, weights
diverged, a step abandoned halfway) the newest checkpoint written before is the resume point, and checkpoints of
diverged weights are removed so that the resume cannot load them. The line names that checkpoint."""

from __future__ import annotations

from collections.abc import Callable

from autotelic.checkpoint import checkpoint_step
from autotelic.checks import TrainingError
from autotelic.config import AlgorithmConfig
from autotelic.divergence import DivergedWeights, DivergenceError, DivergenceGuard, NonFiniteRewards
from autotelic.interrupt import CtrlC, Interrupted, StopRequested
from autotelic.run_state import RunCheckpoints

STOPS = (FloatingPointError, TrainingError, KeyboardInterrupt, StopRequested)  # what ``stopped`` turns into a line


def suggested_lr(lr: float) -> float:
    """A learning rate to resume with: the default where the run's is above it, else a tenth of the run's."""
    default = AlgorithmConfig().lr
    return default if lr > default else lr / 10


def _kept(error: BaseException, step: int, applied: bool) -> str:
    if isinstance(error, DivergedWeights):
        return f"the weights of step {error.of_step} diverged and were neither checkpointed nor exported"
    if applied:
        return f"part of step {step} was applied, so its weights were not checkpointed"
    return f"nothing of step {step} was applied"


def stopped(error: BaseException, done_steps: int, guard: DivergenceGuard, checkpoints: RunCheckpoints,
            save: Callable[[], None]) -> BaseException:
    """The one-line error a run raises for ``error`` (one of ``STOPS``) after ``done_steps`` finished steps;
    ``save`` writes a checkpoint of them. A ``TrainingError`` keeps its type, its message extended. Ctrl-C is
    ignored meanwhile: it takes at most a checkpoint's write, and a press would leave the line unsaid."""
    with CtrlC.ignored():
        return _stopped(error, done_steps, guard, checkpoints, save)


def _stopped(error: BaseException, done_steps: int, guard: DivergenceGuard, checkpoints: RunCheckpoints,
             save: Callable[[], None]) -> BaseException:
    if isinstance(error, DivergedWeights):
        checkpoints.discard_from(error.of_step)
    abandoned = isinstance(error, (DivergedWeights, KeyboardInterrupt)) or guard.applied()
    good = isinstance(error, StopRequested) or not abandoned
    latest = checkpoints.latest()
    if good and done_steps and (latest is None or checkpoint_step(latest) != done_steps):
        save()
        latest = checkpoints.latest()
    last = str(latest) if latest is not None else "none (resuming starts over)"
    resume = f"autotelic resume {checkpoints.run_dir}"
    if isinstance(error, StopRequested):
        return Interrupted(f"interrupted at step {done_steps}; checkpoint: {last}; continue with: {resume}")
    if isinstance(error, KeyboardInterrupt):
        return Interrupted(f"interrupted after step {done_steps} (the work in progress was abandoned); "
                           f"last checkpoint: {last}; continue with: {resume}")
    step = done_steps + 1  # the step in progress (its generation found the last step's weights diverged)
    kept = _kept(error, step, guard.applied())
    if isinstance(error, FloatingPointError):
        if isinstance(error, NonFiniteRewards):
            cause = "a reward in filter.rewards is the likely cause"
        else:
            cause = f"the learning rate (algorithm.lr={guard.lr:g}) is the likely cause"
            resume += f" algorithm.lr={suggested_lr(guard.lr):g}"
        return DivergenceError(f"step {step}: {error}; {cause}; {kept}; last good checkpoint: {last}; "
                               f"resume with: {resume}")
    # the error's own type stays (callers may tell a user's failing code from the rest), its line extended
    error.args = (f"{error}; {kept}; last good checkpoint: {last}; resume with: {resume}",)
    return error

