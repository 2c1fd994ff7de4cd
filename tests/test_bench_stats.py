"""bench/stats.py and bench/artifacts.py: the intervals every bench reports, and the record each run leaves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # bench/ is a directory of scripts, not a package

import artifacts  # noqa: E402
import stats  # noqa: E402


def scores(p: float, shape: tuple[int, int], seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(shape) < p).astype(float)


def test_identical_arms_have_no_gain_and_an_interval_around_zero():
    base = scores(0.5, (1, 200), seed=1)
    record = stats.compare("same", base, base)
    assert record == {"name": "same", "gain_points": 0.0, "ci95": [0.0, 0.0], "seeds": 1, "heldout_n": 200}
    # two arms with the same success rate but independent draws: a gain of noise, its interval holds 0
    lo, hi = stats.compare("noise", base, scores(0.5, (1, 200), seed=2))["ci95"]
    assert lo < 0 < hi


def test_a_clear_gain_excludes_zero_and_is_in_points():
    record = stats.compare("gain", scores(0.3, (1, 300), seed=3), scores(0.6, (1, 300), seed=4))
    lo, hi = record["ci95"]
    assert 20 < record["gain_points"] < 40 and 0 < lo < record["gain_points"] < hi


def test_pairing_removes_the_tasks_own_difficulty():
    """Arm = baseline plus one solved task in 20: unpaired that gain drowns in the tasks' spread, paired it is clear."""
    base = scores(0.5, (1, 400), seed=5)
    arm = base.copy()
    arm[0, np.flatnonzero(base[0] == 0)[::10]] = 1.0
    lo, hi = stats.compare("paired", base, arm)["ci95"]
    assert 0 < lo and hi - lo < 5


def test_seeds_add_their_spread():
    base = scores(0.5, (3, 250), seed=6)
    steady = stats.compare("steady", base, np.clip(base + scores(0.1, (3, 250), seed=7), 0, 1))
    shaky = stats.compare("shaky", base, np.concatenate([base[:1], np.ones((1, 250)), base[2:]]))
    assert steady["seeds"] == 3 and steady["heldout_n"] == 250
    assert steady["ci95"][0] > 0  # the same gain on every seed
    assert shaky["ci95"][0] < 0 < shaky["gain_points"]  # a gain from one seed of three is not established


def test_mean_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(8)
    covered = 0
    for trial in range(200):
        _, (lo, hi) = stats.mean_ci(rng.normal(1.0, 2.0, size=60), seed=trial)
        covered += lo <= 1.0 <= hi
    assert 0.88 <= covered / 200 <= 0.99  # the percentile bootstrap runs a little short at n=60


def test_results_are_deterministic_for_a_seed():
    base, arm = scores(0.4, (1, 100), seed=9), scores(0.5, (1, 100), seed=10)
    assert stats.compare("a", base, arm, seed=3) == stats.compare("a", base, arm, seed=3)


def test_t_quantiles():
    assert stats.t_interval([1.0, 3.0]) == pytest.approx((2 - 12.706, 2 + 12.706), abs=1e-3)
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 4, 9, 29, 30, 31, 60, 500):
        values = np.arange(df + 1, dtype=float)
        half = (stats.t_interval(values)[1] - stats.t_interval(values)[0]) / 2
        exact = scipy_stats.t.ppf(0.975, df) * values.std(ddof=1) / np.sqrt(df + 1)
        assert half == pytest.approx(exact, rel=2e-3)


def test_timing_and_ratio_of_medians():
    summary = stats.timing([2.0, 1.0, 9.0, 3.0, 4.0])
    assert summary == {"median": 3.0, "q1": 2.0, "q3": 4.0, "min": 1.0, "max": 9.0, "n": 5}
    ratio, (lo, hi) = stats.ratio_of_medians([20.0, 22.0, 19.0, 21.0, 60.0], [10.0, 11.0, 9.5, 10.5, 30.0])
    assert ratio == pytest.approx(2.0) and lo <= ratio <= hi
    assert hi - lo < 0.3  # a slow round slows both arms: paired by round, it barely moves the ratio


def test_artifact_records_command_revision_machine_rows_and_comparisons(tmp_path):
    comparison = stats.compare("arm_vs_base", scores(0.3, (1, 50), seed=11), scores(0.5, (1, 50), seed=12))
    path = artifacts.write("unit", [{"arm": "base", "seed": 0, "accuracy": 0.3}], [comparison],
                           summary={"note": "test"}, directory=tmp_path)
    assert path.parent == tmp_path and path.name.startswith("unit-") and path.name.endswith("Z.json")
    record = json.loads(path.read_text())
    assert {"bench", "command", "written_utc", "revision", "machine", "rows", "comparisons"} <= record.keys()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=BENCH, capture_output=True, text=True).stdout.strip()
    assert record["revision"]["commit"] == head and len(head) == 40
    assert isinstance(record["revision"]["dirty"], bool)
    machine = record["machine"]
    assert machine["affinity_cpus"] >= 1 and machine["mem_total_gib"] > 0 and machine["cpu_flags"]
    assert record["comparisons"][0].keys() == {"name", "gain_points", "ci95", "seeds", "heldout_n"}
    with pytest.raises(ValueError, match="arm and seed"):
        artifacts.write("unit", [{"arm": "base"}], [], directory=tmp_path)
