"""Held-out code answers that copy the prompt's example: per run of an archive (``bench/runs.py pack``), how
many of its held-out answers are a function that returns, as a constant, the output its docstring's ``>>>``
example shows, beside the run's accuracy.

On the procedural ``pyfunc`` family that example is also the first of a task's five graded assertions, so such
an answer earns 0.2 of the graded unit-test reward while ignoring its input: a reward a group of failures turns
into a positive advantage.

    python bench/copied_examples.py bench/results/archives/rest_rl-as8-runs.tar.xz [more archives] [--at-least 20]
        [--results-dir bench/results]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import artifacts  # noqa: E402  (bench/artifacts.py: this script's directory is on sys.path)
from autotelic.tasks.code import extract_code  # noqa: E402

_EXAMPLE = re.compile(r">>> \w+\(.*\)\n\s*(.+)\n")


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None


def returned_constant(code: str) -> object:
    """What the code's first function returns when its body is one ``return`` of a literal; None otherwise."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    function = next((node for node in tree.body if isinstance(node, ast.FunctionDef)), None)
    if function is None:
        return None
    body = [node for node in function.body
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    return _literal(ast.unparse(body[0].value))


def copies_example(prompt: str, completion: str) -> bool:
    """Whether the answer returns the prompt's example output as a constant."""
    example = _EXAMPLE.search(prompt)
    if example is None:
        return False
    expected, returned = _literal(example.group(1).strip()), returned_constant(extract_code(completion))
    return returned is not None and returned == expected


@dataclass(frozen=True)
class RunCount:
    run: str
    answers: int
    copied: int
    accuracy: float


def count_archive(archive: Path) -> list[RunCount]:
    """Each run's held-out answers (``eval_after.jsonl``) in the archive, counted."""
    counts = []
    with tarfile.open(archive) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.name.endswith("/eval_after.jsonl"):
                continue
            rows = [json.loads(line) for line in tar.extractfile(member).read().decode().splitlines() if line]
            copied = sum(copies_example(row["prompt"], row["completion"]) for row in rows)
            accuracy = sum(float(row["correct"]) for row in rows) / len(rows) if rows else 0.0
            counts.append(RunCount(Path(member.name).parent.name, len(rows), copied, accuracy))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="+", type=Path)
    parser.add_argument("--at-least", type=int, default=20,
                        help="a run with at least this many copying answers counts as collapsed into copying")
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS)
    args = parser.parse_args(argv)
    missing = [archive for archive in args.archives if not archive.is_file()]
    if missing:
        print(f"{missing[0]}: no such archive; pass archives written by bench/runs.py pack", file=sys.stderr)
        return 2
    rows, summary = [], {"at_least": args.at_least}
    for archive in args.archives:
        for count in count_archive(archive):
            print(f"{archive.name:32} {count.run:24} copied {count.copied:4} of {count.answers}"
                  f"  accuracy {100 * count.accuracy:5.1f}%")
            arm, seed = artifacts.arm_and_seed(count.run)
            rows.append({"arm": arm, "seed": seed, "archive": archive.name, "answers": count.answers,
                         "copied": count.copied, "accuracy": count.accuracy})
    for label, runs in (("copying", [r for r in rows if r["copied"] >= args.at_least]),
                        ("others", [r for r in rows if r["copied"] < args.at_least])):
        if runs:
            accuracies = [run["accuracy"] for run in runs]
            summary[label] = {"runs": len(runs), "accuracy_min": min(accuracies), "accuracy_max": max(accuracies)}
            print(f"{label}: {len(runs)} runs, accuracy {100 * min(accuracies):.1f}% to {100 * max(accuracies):.1f}%: "
                  + ", ".join(sorted(artifacts.run_name(run['arm'], run['seed']) for run in runs)))
    print(f"artifact: {artifacts.write('copied_examples', rows, [], summary, args.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
