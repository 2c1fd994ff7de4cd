"""The one-file examples run as a reader would run them: a subprocess, its printed lines checked."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
STEP = re.compile(r"step (\d+) reward_mean (\S+) loss (\S+) groups (\d+)/(\d+) seconds (\S+)")


@pytest.mark.slow
def test_grpo_minimal_trains_the_embedded_model(embedded_dir):
    # compare level 1: about one sample in five is right, so groups of 8 are rarely all alike (some carry signal)
    command = [sys.executable, str(EXAMPLES / "grpo_minimal.py"), "--steps", "2", "--group-size", "8", "--prompts", "2",
               "--families", "compare", "--levels", "1", "--eval-per-level", "2", "--max-new-tokens", "12"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    steps = [STEP.fullmatch(line) for line in result.stdout.splitlines() if line.startswith("step ")]
    assert all(steps) and [int(m[1]) for m in steps] == [1, 2], result.stdout
    rewards, losses = [float(m[2]) for m in steps], [float(m[3]) for m in steps]
    informative = [int(m[4]) for m in steps]
    assert all(0.0 <= r <= 1.0 for r in rewards) and all(math.isfinite(x) for x in losses)
    assert all(int(m[5]) == 2 for m in steps) and sum(informative) > 0, result.stdout
    change = float(re.search(r"^param_change_norm (\S+)$", result.stdout, re.M)[1])
    assert change > 0  # a step with an informative group moved the weights
    after, before = map(float, re.search(r"^heldout_after (\S+) \(before (\S+)\)$", result.stdout, re.M).groups())
    assert 0.0 <= before <= 1.0 and 0.0 <= after <= 1.0
    assert re.search(rf"^heldout_before {before:.3f} \(2 tasks\)$", result.stdout, re.M), result.stdout
