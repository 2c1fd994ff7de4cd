"""Save and restore a ``random.Random`` in a form that survives JSON and torch.save/torch.load."""

from __future__ import annotations

import random
from typing import Any


def rng_state(rng: random.Random) -> list[Any]:
    """``getstate()`` as lists: JSON turns tuples into lists anyway, so store what comes back."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def set_rng_state(rng: random.Random, state: list[Any] | tuple[Any, ...]) -> None:
    """Accepts lists or tuples; ``setstate`` insists on tuples for the Mersenne Twister words."""
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))
