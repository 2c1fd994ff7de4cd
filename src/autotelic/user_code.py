"""A user's own code (a reward function, an environment) that raises or returns something malformed stops the run
in one line: which function, on which task, what went wrong, and where in the user's own files (their frames, not
ours or a library's), so that it is fixed in their code rather than read out of our traceback.

Rewards (``rewards/custom.py``, ``rollout/filter.py``) and environments (``envs/registry.py``) are guarded where they
are called, so their line names the task too. Any other plug-in (a task family, an algorithm, a mode) is caught at
the command line: an error that passed through the user's frames is told by ``user_failure``; one that did not is
our bug, and keeps its traceback."""

from __future__ import annotations

import inspect
import site
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any, Callable

from autotelic.errors import TrainingError
from autotelic.types import Task

# Where code that is not the user's lives: this package, the standard library and installed packages.
NOT_USERS = [Path(path).resolve() for path in {
    str(Path(__file__).resolve().parent), *site.getsitepackages(), site.getusersitepackages(),
    *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))}]
FRAMES_SHOWN = 3  # innermost ones: where it broke and what called it


class UserCodeError(TrainingError):
    """A user's function raised or returned something malformed: the run stops before the next update."""


def one_line(error: BaseException) -> str:
    """``ValueError: message`` on one line, whatever the message spans."""
    return " ".join(f"{type(error).__name__}: {error}".split())


def as_number(value: Any) -> float | None:
    """What a user's code returned as a reward, as a float; None where it is not a number (a str is not, even
    '0.5': TRL would refuse it too)."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def shown_path(path: str) -> str:
    """A file as the user knows it: relative to the working directory when inside it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def is_users(path: str) -> bool:
    """Whether a frame's file is the user's own (not ours, not a library's, not ``<string>``)."""
    return Path(path).is_file() and not any(Path(path).resolve().is_relative_to(root) for root in NOT_USERS)


def _users(trace: TracebackType | None) -> list[traceback.FrameSummary]:
    return [frame for frame in traceback.extract_tb(trace) if is_users(frame.filename)]


def user_frames(trace: TracebackType | None) -> str:
    """``at file.py:30 in caller > file.py:12 in fn`` for the user's own frames of a traceback, innermost last;
    empty where none is the user's."""
    frames = _users(trace)[-FRAMES_SHOWN:]
    return "at " + " > ".join(f"{shown_path(f.filename)}:{f.lineno} in {f.name}" for f in frames) if frames else ""


def user_failure(error: Exception) -> UserCodeError | None:
    """``error`` as a one-line UserCodeError naming the user's innermost function it passed through (any plug-in
    without a guard of its own); None where it passed through none of the user's code."""
    frames = _users(error.__traceback__)
    if not frames:
        return None
    function = f"{Path(frames[-1].filename).name}:{frames[-1].name}"
    return UserCodeError(f"your code {function} raised {one_line(error)} {user_frames(error.__traceback__)}; fix it")


def defined_at(function: Callable[..., Any]) -> str:
    """``defined at file.py:3`` for a user's function (what returned a malformed value has no frame left to show);
    empty where its source is not a user's file."""
    source = function if inspect.isroutine(function) or inspect.isclass(function) else type(function)  # an object
    try:
        path, line = inspect.getsourcefile(source), inspect.getsourcelines(source)[1]
    except (TypeError, OSError):  # a builtin, a partial
        return ""
    return f"defined at {shown_path(path)}:{line}" if path and is_users(path) else ""


def shortened(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def task_label(task: Task) -> str:
    """The task by its uid and, where the uid does not already start with it (built-in families' do), the start
    of its prompt."""
    uid, prompt = shortened(task.uid, 60), shortened(task.prompt, 40)
    return f"task {uid}" if prompt[:20] in task.uid else f"task {uid} ({prompt!r})"
