"""Which layer a value model should read, and whether training its body helps: cross-validation over the value
targets of training problems only.

The targets are MCTS node values with test-scored rollouts on training problems (the held-out set excluded): the
decoding bench's (``bench/decoding.py``: each seed's ``value_model/value_data.jsonl`` under ``--runs-dir``) or the
files ``autotelic value MODEL --out DIR`` writes (``--data DIR/value_data.jsonl ...``). A problem is its prompt
without the name of the function it defines (pyfunc draws one per task, and two seeds may search one problem under
two names). The problems are split into ``--folds`` folds; for each ``--depths`` value a frozen body cut to that
share of its layers (``value.depth``) computes every example's features once, and a head is fit
(``ValueModel.fit``, the recipe's epochs, lr and batch, or ``--set value.KEY=VALUE``) on the other folds' examples
and scores this fold's. With ``--bodies frozen lora``, each fold also gets a fresh LoRA body (adapters drawn from
the fold's seed) whose head, fit the same way first, goes on training with the adapters (``value.body_epochs``,
``value.body_lr``) before scoring the fold from its own features; the frozen head then gets those passes too, so
the heads train as long. Per problem:
- pick: the target of the finished answer it scores highest, over the problems whose finished answers differ
  (how well it would choose among best-of-n's candidates; random is their mean, best their maximum);
- finished AUC and partial AUC: how often it ranks a right (target >= 0.9) finished answer above a wrong one, and a
  promising (>= 0.5) partial program above a hopeless one, within a problem (what guides VM-MCTS).
A response is finished when its code block is closed (pyfunc answers are one block). With ``--shares``, each
fold's head is also fit on only that share of the other folds' problems (a seeded draw per fold): a learning curve
over training problems, which is what ``value.tasks`` buys. With ``--folds-dir DIR`` each fold's scores are kept in
DIR as it ends, and a later invocation on the same data, fold split, fit settings and code (as ``--reuse``: the git
trees of src/ and recipes/, and this script) reuses them (a trained body's study can outlast a session; its rows
count the folds reused).

    python bench/value_depth.py --runs-dir RUNS --depths 0.4 0.6 0.8 1.0
    python bench/value_depth.py --runs-dir RUNS --depths 0.6 --shares 0.25 0.5 0.75 1.0
    python bench/value_depth.py --data D0/value_data.jsonl D1/value_data.jsonl --depths 0.6 --bodies frozen lora
    python bench/value_depth.py --data D0/value_data.jsonl --bodies frozen lora --set value.body_lr=2e-4
    python bench/value_depth.py --data D0/value_data.jsonl --bodies frozen lora --folds-dir /work/vd-folds
Writes bench/results/value_depth-*.json: a row per body, depth and share, comparisons depth_<d>_vs_depth_<deepest>
on pick at the largest share, with shares depth_<d>_share_<largest>_vs_share_<s> on pick, finished AUC and partial
AUC, with bodies <body>_vs_<first body>_depth_<d> on the three (each paired over the problems, one
cross-validation; a trained body's depth and share comparisons are prefixed with its name), the data files'
sha256 in the summary, and per row the seconds the features took (shared by a depth's rows) and those of its fits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import artifacts  # bench/artifacts.py: the importing script's directory is on sys.path
import numpy as np
import torch
from runs import comparison_line, provenance
from stats import Comparison, compare

from autotelic.loading import load_config
from autotelic.value_model import BODIES, ValueExample, ValueModel

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "rest-rl-code.yaml"
RIGHT, PROMISING = 0.9, 0.5
DEFINED = re.compile(r"def (\w+)\(")
SET_BY_FLAGS = {"value.depth": "--depths", "value.body": "--bodies"}
AUCS = ("finished_auc", "partial_auc")


def finished(response: str) -> bool:
    return response.count("```") >= 2


def within_problem_auc(scored: list[tuple[float, float]], threshold: float) -> float | None:
    """Share of (good, bad) pairs of one problem ranked good first, ties half; None without both kinds."""
    good = [s for s, t in scored if t >= threshold]
    bad = [s for s, t in scored if t < threshold]
    if not good or not bad:
        return None
    return float(np.mean([(g > b) + 0.5 * (g == b) for g in good for b in bad]))


def problem_key(prompt: str) -> str:
    """A problem's identity across value files: pyfunc draws a function name per task that does not make it another
    task, so two seeds may search one problem under two names; the name defined first is taken out."""
    found = DEFINED.search(prompt)
    return prompt if found is None else re.sub(rf"\b{re.escape(found.group(1))}\b", "_", prompt)


@dataclass(frozen=True)
class KeptFolds:
    """Each fold's held scores on disk (``--folds-dir``), reused by a later invocation only when everything they
    depend on is equal: the data, the fold split, the fit settings, the body and the code (a study longer than a
    session resumes where it stopped)."""

    directory: Path
    identity: dict[str, Any]

    def _path(self, arm: str, fold: int) -> Path:
        return self.directory / f"{arm}-fold{fold}.json"

    def load(self, arm: str, fold: int, settings: dict[str, Any]) -> dict[str, Any] | None:
        path = self._path(arm, fold)
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        return record if record["identity"] == {**self.identity, **settings} else None

    def save(self, arm: str, fold: int, settings: dict[str, Any], record: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path(arm, fold).write_text(json.dumps({"identity": {**self.identity, **settings}, **record}) + "\n")


def score_folds(examples: list[ValueExample], keys: list[str], features: torch.Tensor,
                fold_model: Callable[[], ValueModel], folds: list[set[str]], fit: dict[str, float],
                share: float = 1.0, kept_folds: KeptFolds | None = None,
                arm: str = "") -> tuple[list[float], float, float, int]:
    """Each example's score from a value model fit on ``share`` of the other folds' problems (``keys``: each
    example's problem), how many problems a model was fit on (the mean over folds), the folds' fit seconds and how
    many folds ``kept_folds`` held already (``arm`` names them there). ``features``: every example's under the
    untrained body, for each fold's head to start from; a trained body (``fold_model`` gives a fresh one per fold,
    its adapters drawn from the fold's seed) then scores its held fold from its own features."""
    scores, fitted_on, seconds, reused = [0.0] * len(examples), [], 0.0, 0
    settings = {"fit": fit, "share": share}
    for fold, held in enumerate(folds):
        others = sorted(set(keys) - held)
        random.Random(fold).shuffle(others)
        kept = set(others[:max(1, round(share * len(others)))])
        fitted_on.append(len(kept))
        record = kept_folds.load(arm, fold, settings) if kept_folds else None
        if record is None:
            started = time.perf_counter()
            train = [i for i, key in enumerate(keys) if key in kept]
            test = [i for i, key in enumerate(keys) if key in held]
            torch.manual_seed(fold)
            model = fold_model()
            model.fit([examples[i] for i in train], features=features[train], seed=fold, **fit)
            held_features = (model.kept_prompt_features([(examples[i].prompt, examples[i].response) for i in test])
                             if model.train_body else features[test])
            with torch.no_grad():
                record = {"scores": dict(zip(test, model.head(held_features).tolist())),
                          "seconds": time.perf_counter() - started}
            if kept_folds:
                kept_folds.save(arm, fold, settings, record)
        else:
            reused += 1
            print(f"{arm} fold {fold}: reusing its kept scores", flush=True)
        for i, value in record["scores"].items():
            scores[int(i)] = value
        seconds += record["seconds"]
    return scores, float(np.mean(fitted_on)), seconds, reused


def problem_measures(examples: list[ValueExample], keys: list[str],
                     scores: list[float]) -> dict[str, dict[str, float]]:
    by_problem: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for example, key, score in zip(examples, keys, scores):
        by_problem[key]["finished" if finished(example.response) else "partial"].append((score, example.target))
    measures: dict[str, dict[str, float]] = {}
    for prompt, kinds in by_problem.items():
        done = kinds["finished"]
        targets = [t for _, t in done]
        entry: dict[str, float] = {}
        if targets and max(targets) > min(targets):
            picked = max(done, key=lambda scored: scored[0])  # by score alone: a tie does not peek at targets
            entry.update(pick=picked[1], random=float(np.mean(targets)), best=max(targets))
        for name, kind, threshold in (("finished_auc", "finished", RIGHT), ("partial_auc", "partial", PROMISING)):
            auc = within_problem_auc(kinds[kind], threshold)
            if auc is not None:
                entry[name] = auc
        measures[prompt] = entry
    return measures


def paired(name: str, baseline: dict[str, dict[str, float]], arm: dict[str, dict[str, float]],
           measure: str) -> Comparison:
    """``measure`` of ``arm`` against ``baseline`` over the problems where both have it."""
    shared = [p for p in sorted(baseline) if measure in baseline[p] and measure in arm.get(p, {})]
    return compare(name, [[baseline[p][measure] for p in shared]], [[arm[p][measure] for p in shared]])


def data_files(args: argparse.Namespace) -> list[Path]:
    if args.data:
        missing = [str(f) for f in args.data if not f.is_file()]
        if missing:
            raise SystemExit(f"--data {' '.join(missing)}: no such file; `autotelic value MODEL --out DIR` writes "
                             "DIR/value_data.jsonl")
        return sorted(args.data)
    files = sorted(args.runs_dir.glob("decoding-s*/value_model/value_data.jsonl"))
    if not files:
        raise SystemExit(f"{args.runs_dir}: no decoding-s*/value_model/value_data.jsonl; run bench/decoding.py "
                         "with --runs-dir there first")
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--runs-dir", type=Path, help="a bench/decoding.py runs directory")
    source.add_argument("--data", type=Path, nargs="+", help="value_data.jsonl files (`autotelic value --out`)")
    parser.add_argument("--depths", type=float, nargs="+", default=[0.4, 0.6, 0.8, 1.0])
    parser.add_argument("--bodies", nargs="+", choices=BODIES, default=["frozen"],
                        help="value.body for each arm: lora and full go on training the body after the head")
    parser.add_argument("--shares", type=float, nargs="+", default=[1.0],
                        help="shares of the other folds' problems each head is fit on (a learning curve)")
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--model", default=None, help="the body (default: the recipe's, the embedded model)")
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS)
    parser.add_argument("--folds-dir", type=Path, default=None,
                        help="keep each fold's scores here, and reuse those of the same data, settings and code")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="value.KEY=VALUE",
                        help="the recipe's value-model fit settings, overridden (repeat for several)")
    args = parser.parse_args()
    for override in args.overrides:
        key = override.split("=", 1)[0].strip()
        if not key.startswith("value.") or key in SET_BY_FLAGS:
            parser.error(f"--set {override}: only value.* fit settings are set here"
                         + (f"; {key} is {SET_BY_FLAGS[key]}'s" if key in SET_BY_FLAGS else ""))
    if not all(0.0 < share <= 1.0 for share in args.shares):
        raise SystemExit(f"--shares {' '.join(map(str, args.shares))}: each share is a fraction in (0, 1] of the "
                         "training folds' problems")
    files = data_files(args)
    examples = [ValueExample(**json.loads(line)) for file in files for line in file.read_text().splitlines()]
    keys = [problem_key(e.prompt) for e in examples]
    prompts = sorted(set(keys))
    random.Random(0).shuffle(prompts)
    folds = [set(prompts[k::args.folds]) for k in range(args.folds)]
    value = load_config(RECIPE, args.overrides).value
    fit = {"epochs": value.epochs, "lr": value.lr, "batch_size": value.batch_size, "body_epochs": value.body_epochs,
           "body_lr": value.body_lr}
    # beside a trained body, whose head goes on learning for body_epochs, the frozen body's head gets those passes too
    frozen_fit = {"epochs": fit["epochs"] + (fit["body_epochs"] if set(args.bodies) - {"frozen"} else 0),
                  "lr": fit["lr"], "batch_size": fit["batch_size"]}
    data = {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    # the code a kept fold stands for, by the rule --reuse follows: src/ and recipes/ git trees and this script
    code = provenance([sys.executable, str(Path(__file__).resolve())])
    if args.folds_dir is not None and code["code"] is None:
        print(f"--folds-dir {args.folds_dir}: folds neither kept nor reused, src/ or recipes/ has uncommitted "
              "changes (commit them so a kept fold names the code it ran)", flush=True)
    kept_folds = None if args.folds_dir is None or code["code"] is None else KeptFolds(args.folds_dir, {
        "data": sorted(data.values()), "folds": args.folds, "model": args.model, "code": code})
    torch.set_num_threads(1)
    rows, per_problem = [], {}
    for depth in args.depths:
        started = time.perf_counter()
        frozen = ValueModel(args.model, depth=depth)
        features = frozen.kept_prompt_features([(e.prompt, e.response) for e in examples])
        feature_seconds = round(time.perf_counter() - started, 1)
        for body in args.bodies:
            def fold_model() -> ValueModel:  # a trained body starts afresh in each fold
                return frozen if body == "frozen" else ValueModel(args.model, body=body, depth=depth)

            for share in args.shares:
                scores, fitted_on, fit_seconds, reused = score_folds(
                    examples, keys, features, fold_model, folds, frozen_fit if body == "frozen" else fit, share,
                    kept_folds, f"{body}-depth{depth}-share{share}")
                measures = problem_measures(examples, keys, scores)
                per_problem[body, depth, share] = measures
                row = {"arm": ", ".join([*([f"{body} body"] if len(args.bodies) > 1 else []), f"depth {depth}",
                                         *([f"share {share}"] if len(args.shares) > 1 else [])]), "seed": 0,
                       "body": body, "depth": depth, "layers": frozen.body.config.num_hidden_layers, "share": share,
                       "fit_problems": fitted_on, "problems": len(prompts),
                       "pick_problems": sum("pick" in m for m in measures.values()),
                       "feature_seconds": feature_seconds, "fit_seconds": round(fit_seconds, 1),
                       "reused_folds": reused}
                for name in ("pick", "random", "best", *AUCS):
                    values = [m[name] for m in measures.values() if name in m]
                    row[name] = float(np.mean(values))
                    row[f"{name}_problems"] = len(values)
                rows.append(row)
                print(f"{row['arm']} ({row['layers']} layers, fit on {fitted_on:.0f} problems): pick "
                      f"{row['pick']:.3f} (random {row['random']:.3f}, best {row['best']:.3f}, "
                      f"{row['pick_problems']} problems)  finished AUC {row['finished_auc']:.3f}  partial AUC "
                      f"{row['partial_auc']:.3f}  ({row['feature_seconds'] + row['fit_seconds']:.0f} s)", flush=True)
    last, full, base = max(args.depths), max(args.shares), args.bodies[0]

    def named(body: str, name: str) -> str:
        return name if body == "frozen" else f"{body}_{name}"

    def measured(measure: str) -> str:
        return "" if measure == "pick" else f"_{measure}"

    comparisons = [paired(named(body, f"depth_{depth}_vs_depth_{last}"), per_problem[body, last, full],
                          per_problem[body, depth, full], "pick")
                   for body in args.bodies for depth in args.depths if depth != last]
    comparisons += [paired(named(body, f"depth_{depth}_share_{full}_vs_share_{share}") + measured(name),
                           per_problem[body, depth, share], per_problem[body, depth, full], name)
                    for body in args.bodies for depth in args.depths for share in args.shares if share != full
                    for name in ("pick", *AUCS)]
    comparisons += [paired(f"{body}_vs_{base}_depth_{depth}" + measured(name), per_problem[base, depth, full],
                           per_problem[body, depth, full], name)
                    for body in args.bodies if body != base for depth in args.depths for name in ("pick", *AUCS)]
    path = artifacts.write("value_depth", rows, comparisons, {
        "data": data, "examples": len(examples),
        "folds": args.folds, "shares": args.shares, "bodies": args.bodies, "fit": fit, "frozen_fit": frozen_fit,
        "model": args.model or "the recipe's"}, directory=args.results_dir)
    print(f"artifact: {path}")
    for comparison in comparisons:
        print(comparison_line(comparison))


if __name__ == "__main__":
    main()
