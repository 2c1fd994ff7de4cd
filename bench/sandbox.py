"""Executions per second of the sandbox on a trivial test program, and its cost over a bare process.

Measured in one run on this machine, ``--rounds`` times in turn so a drift in the machine's speed falls on
every measurement alike: a bare `subprocess.run([sys.executable, "-c", "pass"])` (the floor: one interpreter
start), the sandbox one program at a time (`Sandbox.run`), and a batch through `Sandbox.map` at the default
worker count (one per CPU) and at twice that. The program is a solution plus its unit test, as the unit-test
reward runs them. Each figure is the median over rounds, with its range.

    python bench/sandbox.py [--n 40] [--rounds 5]

Writes bench/results/sandbox-<UTC time>.json. Last line: executions_per_second=X (Sandbox.map at the default
worker count, median over rounds).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable

import artifacts  # bench/artifacts.py and bench/stats.py: this script's directory is on sys.path
import stats
from autotelic.sandbox import Sandbox

PROGRAM = (
    "def add(a, b):\n    return a + b\n\n"
    "assert add(2, 3) == 5\nassert add(-1, 1) == 0\nprint('passed')\n"
)


def per_second(n: int, fn: Callable[[int], None]) -> float:
    start = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - start)


def bare(n: int) -> None:
    for _ in range(n):
        subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)


def sequential(box: Sandbox) -> Callable[[int], None]:
    def run(n: int) -> None:
        assert all(box.run(PROGRAM).ok for _ in range(n))
    return run


def mapped(box: Sandbox) -> Callable[[int], None]:
    def run(n: int) -> None:
        assert all(r.ok for r in box.map([PROGRAM] * n))
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="programs per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="times each measurement is repeated")
    args = parser.parse_args()

    box = Sandbox()
    assert box.run(PROGRAM).stdout == "passed\n"  # warm-up; detection already ran in Sandbox()
    wide = Sandbox(workers=2 * box.workers)
    measurements = {
        "bare_python": bare,
        "sandbox_run_sequential": sequential(box),
        f"sandbox_map_{box.workers}_workers": mapped(box),
        f"sandbox_map_{wide.workers}_workers": mapped(wide),
    }
    rates: dict[str, list[float]] = {name: [] for name in measurements}
    for _ in range(args.rounds):
        for name, fn in measurements.items():
            rates[name].append(per_second(args.n, fn))
    box.close()
    wide.close()

    rows = []
    for name, values in rates.items():
        spread = stats.timing(values)
        rows.append({"arm": name, "seed": 0, "per_second": [round(v, 2) for v in values], "timing": spread})
        print(f"{name:28s} median {spread['median']:6.1f}/s  range {spread['min']:.1f}-{spread['max']:.1f}  "
              f"({1000 / spread['median']:5.1f} ms each)")
    bare_rate = stats.timing(rates["bare_python"])["median"]
    seq_rate = stats.timing(rates["sandbox_run_sequential"])["median"]
    map_rate = stats.timing(rates[f"sandbox_map_{box.workers}_workers"])["median"]
    path = artifacts.write("sandbox", rows, [], summary={
        "isolation": box.isolation, "programs_per_measurement": args.n, "rounds": args.rounds,
        "overhead_ratio": round(bare_rate / seq_rate, 3), "executions_per_second": round(map_rate, 1)})
    print(f"isolation: {box.isolation}")
    print(f"artifact: {path}")
    print(f"overhead_ratio={bare_rate / seq_rate:.2f} (sandboxed call time / bare call time, sequential)")
    print(f"executions_per_second={map_rate:.1f}")


if __name__ == "__main__":
    main()
