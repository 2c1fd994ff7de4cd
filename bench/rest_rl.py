"""ReST-RL on code: pass@1 on a held-out code set for the base model, plain GRPO, ReST-GRPO, and
ReST-GRPO with value-model decoding (best-of-n picked by the value model, and VM-MCTS) at the same
completion-token budget per task.

Both training arms run ``recipes/rest-rl-code.yaml`` (embedded SmolLM2-135M, unit-test rewards in
the sandbox) for the same training minutes, one after the other with every core:
- grpo: GRPO on groups with any reward spread; no partial-solution prompts, no dynamic sampling;
- rest: ReST-GRPO (groups of reward std < 0.05 dropped and refilled, partial-solution prompts cut
        from correct answers), then VM-MCTS: MCTS with test-scored rollouts on training problems
        labels partial programs, a value model learns them, and the held-out set is decoded with it.
Prints a table and, last, ``vm_mcts_gain_points=X`` (VM-MCTS minus ReST-GRPO greedy, in points).

    python bench/rest_rl.py                  # 10 training minutes per arm, ~35 min in all
    python bench/rest_rl.py --minutes 4      # quicker, noisier
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from runs import launch  # bench/runs.py: this script's directory is on sys.path

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "rest-rl-code.yaml"
ARMS = {
    "grpo": ["curriculum.prefix_fraction=0", "filter.min_reward_std=0", "filter.dynamic_sampling=false",
             "value.enabled=false"],
    "rest": [],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="training minutes per arm")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here")
    parser.add_argument("--oracle", action="store_true",
                        help="also best-of-n picked by the hidden tests: the headroom a perfect value model would have")
    parser.add_argument("--reuse", action="store_true", help="keep arms already finished in --runs-dir")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for both arms")
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="rest-rl-"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    summaries = {}
    for name, overrides in ARMS.items():
        if args.reuse and (runs_dir / name / "summary.json").is_file():
            print(f"arm {name}: reusing {runs_dir / name}")
        elif launch(name, overrides + args.overrides, runs_dir, args.minutes, None, RECIPE).wait() != 0:
            sys.exit(f"arm {name} failed: see {runs_dir / (name + '.log')}")
        summaries[name] = json.loads((runs_dir / name / "summary.json").read_text())
    grpo, rest = summaries["grpo"], summaries["rest"]
    decodings = rest["value"]["decodings"]
    rows = [
        ("base model, greedy", grpo["eval_before"]),
        (f"plain GRPO ({grpo['steps']} steps), greedy", grpo["eval_after"]),
        (f"ReST-GRPO ({rest['steps']} steps), greedy", rest["eval_after"]),
        ("ReST-GRPO + best-of-n by value model", decodings["best_of_n"]),
        ("ReST-GRPO + VM-MCTS", decodings["vm_mcts"]),
    ]
    if args.oracle:
        command = [sys.executable, "-m", "autotelic.cli", "eval", str(runs_dir / "rest"), "eval.decoding=best_of_n",
                   "eval.select_by=verifier", *args.overrides]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append(("ReST-GRPO + best-of-n by hidden tests (oracle)", json.loads(done.stdout)))
    print(f"held-out: {rest['heldout_tasks']} code tasks; value model trained on "
          f"{rest['value']['metrics']['value/examples']:.0f} search nodes and rollouts")
    print(f"{'':44s} {'pass@1':>7s} {'tokens/task':>12s}")
    for label, result in rows:
        print(f"{label:44s} {result['accuracy']:7.1%} {result.get('tokens_per_task', 0):12.0f}")
    print(f"runs in {runs_dir}")
    gain = 100 * (decodings["vm_mcts"]["accuracy"] - rest["eval_after"]["accuracy"])
    print(f"vm_mcts_gain_points={gain:.1f}")


if __name__ == "__main__":
    main()
