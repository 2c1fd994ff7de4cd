"""Honest statistics for the benchmarks: gains with 95% intervals, timings with their spread.

Accuracy comparisons (two arms scored 0/1 or in [0, 1] on the same held-out tasks):

- one seed: the paired bootstrap over tasks (resample task indices, the same ones for both arms), so the
  interval reflects which tasks happened to be held out, and the pairing removes the tasks' own difficulty;
- several seeds: that task interval combined in quadrature with a Student-t interval over the per-seed gains.
  A t-interval, not a bootstrap over seeds: with the 3-5 seeds a bench can afford, a bootstrap over seeds has
  a handful of distinct resamples and its percentile interval is too narrow (it lacks the t tail); each
  per-seed gain is a mean over hundreds of tasks, so it is close to normal and the t-interval is the right
  one. The seeds share one held-out set, so their spread carries training noise but not the task sampling;
  the two sources are independent, hence the quadrature sum.

Every resampling draws from ``numpy.random.default_rng(seed)``: the same inputs give the same interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypedDict

import numpy as np

RESAMPLES = 10_000
# Student-t 0.975 quantiles for 1-30 degrees of freedom (scipy is not a dependency); beyond, the
# Cornish-Fisher term 1.96 + 2.372 / df is within 0.003 of the exact value.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


class Comparison(TypedDict):
    """One arm against its baseline, the record every bench writes under ``comparisons``."""

    name: str
    gain_points: float  # mean accuracy of the arm minus the baseline's, in percentage points
    ci95: list[float]  # [lo, hi], in points
    seeds: int
    heldout_n: int


class Timing(TypedDict):
    median: float
    q1: float
    q3: float
    min: float
    max: float
    n: int


def paired_bootstrap(columns: Sequence[Sequence[float]], statistic: Callable[..., np.ndarray],
                     resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of ``statistic(*columns)``, resampling units: the same indices in every column.

    Each column is one arm's values on the same units (tasks, or timing rounds), so unit i of every column
    stays together: what the units share cancels instead of widening the interval. ``statistic`` gets one
    (resamples, units) array per column and returns one value per resample.
    """
    data = np.asarray(columns, dtype=float)  # (columns, units)
    picks = np.random.default_rng(seed).integers(0, data.shape[1], size=(resamples, data.shape[1]))
    lo, hi = np.percentile(statistic(*data[:, picks]), [2.5, 97.5])
    return float(lo), float(hi)


def _mean(resampled: np.ndarray) -> np.ndarray:
    return resampled.mean(axis=-1)


def mean_ci(values: Sequence[float], seed: int = 0) -> tuple[float, tuple[float, float]]:
    """Mean and its 95% bootstrap interval."""
    return float(np.mean(values)), paired_bootstrap([values], _mean, seed=seed)


def t_interval(values: Sequence[float]) -> tuple[float, float]:
    """95% Student-t interval of the mean of a few independent values (at least two)."""
    values = np.asarray(values, dtype=float)
    df = len(values) - 1
    quantile = T975[df - 1] if df <= len(T975) else 1.96 + 2.372 / df
    half = quantile * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def compare(name: str, baseline: Sequence[Sequence[float]], arm: Sequence[Sequence[float]],
            seed: int = 0) -> Comparison:
    """``arm`` against ``baseline``: one row per seed, one per-task score per held-out task, same task order.

    The gain is the mean over seeds and tasks, in points; the interval is described in the module docstring.
    """
    base, treated = np.asarray(baseline, dtype=float), np.asarray(arm, dtype=float)
    if base.shape != treated.shape or base.ndim != 2:
        raise ValueError(f"both arms need seeds x tasks scores of one shape, got {base.shape} and {treated.shape}")
    per_task = (treated - base).mean(axis=0)  # averaged over seeds, paired by task
    gain = float(per_task.mean())
    lo, hi = paired_bootstrap([per_task], _mean, seed=seed)
    if len(base) > 1:
        seed_lo, seed_hi = t_interval((treated - base).mean(axis=1))
        lo = gain - float(np.hypot(gain - lo, gain - seed_lo))
        hi = gain + float(np.hypot(hi - gain, seed_hi - gain))
    return Comparison(name=name, gain_points=round(100 * gain, 2), ci95=[round(100 * lo, 2), round(100 * hi, 2)],
                      seeds=len(base), heldout_n=base.shape[1])


def timing(seconds: Sequence[float]) -> Timing:
    """Median and spread of repeated timings: the median resists the odd slow step that a mean would absorb."""
    q1, median, q3 = np.percentile(seconds, [25, 50, 75])
    return Timing(median=float(median), q1=float(q1), q3=float(q3), min=float(min(seconds)),
                  max=float(max(seconds)), n=len(seconds))


def ratio_of_medians(numerator: Sequence[float], denominator: Sequence[float],
                     seed: int = 0) -> tuple[float, tuple[float, float]]:
    """median(numerator) / median(denominator) with a 95% interval from the paired bootstrap over rounds.

    Entry i of both is from round i, timed back to back on the same machine state, so they are paired.
    """
    def ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.median(a, axis=-1) / np.median(b, axis=-1)

    return float(ratio(np.asarray(numerator), np.asarray(denominator))), paired_bootstrap(
        [numerator, denominator], ratio, seed=seed)
