"""Errors the command line tells in one line (exit code 2), kept here apart from ``checks.py`` so that any layer,
a reward worker's scorer included, may raise them without importing the model backends."""


class TrainingError(RuntimeError):
    """A run that cannot go on, for a reason the user can fix; its message is one line naming the fix."""
