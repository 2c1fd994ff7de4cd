"""Executions per second of the sandbox on a trivial test program, and its cost over a bare process.

Measured in one run on this machine: a bare `subprocess.run([sys.executable, "-c", "pass"])` (the
floor: one interpreter start), then the sandbox one program at a time (`Sandbox.run`), then a batch
through `Sandbox.map` at the default worker count (one per CPU) and at twice that. The program is a
solution plus its unit test, as the unit-test reward runs them.

    python bench/sandbox.py [--n 40]

Last line: executions_per_second=X (Sandbox.map at the default worker count).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from autotelic.sandbox import Sandbox

PROGRAM = (
    "def add(a, b):\n    return a + b\n\n"
    "assert add(2, 3) == 5\nassert add(-1, 1) == 0\nprint('passed')\n"
)


def per_second(n: int, fn) -> float:
    start = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="programs per measurement")
    args = parser.parse_args()

    box = Sandbox()
    assert box.run(PROGRAM).stdout == "passed\n"  # warm-up; detection already ran in Sandbox()

    def bare(n):
        for _ in range(n):
            subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)

    def sequential(n):
        assert all(box.run(PROGRAM).ok for _ in range(n))

    def mapped(box):
        def run(n):
            assert all(r.ok for r in box.map([PROGRAM] * n))
        return run

    bare_rate = per_second(args.n, bare)
    seq_rate = per_second(args.n, sequential)
    map_rate = per_second(args.n, mapped(box))
    with Sandbox(workers=2 * box.workers) as wide:
        wide_rate = per_second(args.n, mapped(wide))
    box.close()

    print(f"isolation: {box.isolation}")
    print(f"bare python -c pass:        {bare_rate:6.1f}/s  ({1000 / bare_rate:5.1f} ms each)")
    print(f"Sandbox.run, sequential:    {seq_rate:6.1f}/s  ({1000 / seq_rate:5.1f} ms each)")
    print(f"Sandbox.map, {box.workers} workers:     {map_rate:6.1f}/s")
    print(f"Sandbox.map, {2 * box.workers} workers:     {wide_rate:6.1f}/s")
    print(f"overhead_ratio={bare_rate / seq_rate:.2f} (sandboxed call time / bare call time, sequential)")
    print(f"executions_per_second={map_rate:.1f}")


if __name__ == "__main__":
    main()
