"""report.html: reward, held-out accuracy, curriculum and the rollout stages over time, as embedded PNGs."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from autotelic.types import SHARE_PREFIX  # noqa: E402


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _png(fig: plt.Figure) -> str:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _reward_plot(rows: list[dict[str, Any]]) -> str:
    fig, ax = plt.subplots(figsize=(7, 3.2))
    steps = [r["step"] for r in rows if "reward/mean" in r]
    ax.plot(steps, [r["reward/mean"] for r in rows if "reward/mean" in r], label="mean reward", color="black")
    families = sorted({k for r in rows for k in r if k.startswith("reward/") and k != "reward/mean"})
    for key in families:
        points = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot(*zip(*points), ".", alpha=0.5, label=key.split("/", 1)[1])
    ax.set_xlabel("step"), ax.set_ylabel("reward"), ax.set_ylim(-0.05, 1.05), ax.legend(fontsize=7, ncol=3)
    ax.set_title("Training reward")
    return _png(fig)


def _accuracy_plot(evals: list[dict[str, Any]]) -> str:
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot([e["step"] for e in evals], [e["accuracy"] for e in evals], "o-")
    ax.set_xlabel("step"), ax.set_ylabel("held-out accuracy (greedy)"), ax.set_ylim(0, 1)
    ax.set_title("Held-out accuracy")
    return _png(fig)


def _web_plot(rows: list[dict[str, Any]]) -> str | None:
    """Web episodes: task success and progress over training."""
    if not any("web/success_rate" in r for r in rows):
        return None
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for key, label in (("web/success_rate", "task success rate"), ("web/progress", "milestones reached"),
                       ("web/valid_actions", "actions that executed")):
        points = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot(*zip(*points), "o-", label=label, markersize=3)
    ax.set_xlabel("step"), ax.set_ylabel("share of episodes / steps"), ax.set_ylim(-0.05, 1.05), ax.legend(fontsize=7)
    ax.set_title("Web agent: success and progress (training episodes)")
    return _png(fig)


def _family_and_level(arm: str) -> tuple[str, int]:
    """Split a curriculum arm key, ``family/L<level>``."""
    family, level = arm.rsplit("/L", 1)
    return family, int(level)


def _curriculum_plot(rows: list[dict[str, Any]]) -> str:
    """Left: sampling share of each family; right: the expected level drawn within each family."""
    shared = [r for r in rows if any(k.startswith(SHARE_PREFIX) for k in r)]
    arms = sorted({k[len(SHARE_PREFIX):] for r in shared for k in r if k.startswith(SHARE_PREFIX)})
    arms_of: dict[str, list[tuple[str, int]]] = {}
    for arm in arms:
        family, level = _family_and_level(arm)
        arms_of.setdefault(family, []).append((SHARE_PREFIX + arm, level))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
    if shared:
        steps = [r["step"] for r in shared]
        shares = {f: [sum(r.get(key, 0.0) for key, _ in keys) for r in shared] for f, keys in arms_of.items()}
        left.stackplot(steps, *shares.values(), labels=list(shares))
        left.legend(fontsize=7, loc="upper left")
        for family, keys in arms_of.items():
            levels = [sum(level * r.get(key, 0.0) for key, level in keys) / total if total > 0 else float("nan")
                      for r, total in zip(shared, shares[family])]
            right.plot(steps, levels, label=family)
        right.legend(fontsize=7)
    left.set_xlabel("step"), left.set_ylabel("sampling probability"), left.set_title("Curriculum mix by family")
    right.set_xlabel("step"), right.set_ylabel("expected level"), right.set_title("Curriculum difficulty by family")
    return _png(fig)


STAGES = ("generate", "filter", "control", "replay", "update")


def _stages_plot(rows: list[dict[str, Any]]) -> str:
    """Left: seconds per step in each rollout stage and the update; right: groups kept and dropped (by reason)."""
    steps_rows = [r for r in rows if "reward/mean" in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
    if steps_rows:
        steps = [r["step"] for r in steps_rows]
        left.stackplot(steps, *[[r.get(f"time/{stage}", 0.0) for r in steps_rows] for stage in STAGES],
                       labels=list(STAGES))
        left.legend(fontsize=7, loc="upper left")
        reasons = sorted({k for r in steps_rows for k in r if k.startswith("filter/dropped_")})
        right.stackplot(steps, [r.get("filter/kept_groups", 0.0) for r in steps_rows],
                        *[[r.get(k, 0.0) for r in steps_rows] for k in reasons],
                        labels=["kept"] + [k[len("filter/dropped_"):] for k in reasons])
        right.legend(fontsize=7, loc="upper left")
    left.set_xlabel("step"), left.set_ylabel("seconds"), left.set_title("Time per stage")
    right.set_xlabel("step"), right.set_ylabel("groups"), right.set_title("Filter: kept and dropped groups")
    return _png(fig)


def _guardrails_plot(rows: list[dict[str, Any]]) -> str | None:
    """guardrails.py's signals over training (each only on the steps that measured it)."""
    keys = sorted({k for r in rows for k in r if k.startswith("guard/") and k != "guard/alarm"})
    if not keys:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for key in keys:
        points = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot(*zip(*points), "o-", markersize=3, label=key.split("/", 1)[1].replace("_", " "))
    for step in [r["step"] for r in rows if r.get("guard/alarm")]:
        ax.axvline(step, color="red", alpha=0.4)
    ax.set_xlabel("step"), ax.set_ylabel("share"), ax.set_ylim(-0.05, 1.05), ax.legend(fontsize=7, ncol=2)
    ax.set_title("Guardrails (red: a step that raised an alarm)")
    return _png(fig)


def _alarms(alarms: list[dict[str, Any]] | None) -> str:
    if alarms is None:  # a run from before the guardrails
        return ""
    if not alarms:
        return "<p>Guardrails: no alarm.</p>"
    cells = "".join(f"<tr><td>{a['step']}</td><td>{html.escape(a['signal'])}</td><td>{a['value']:.2f}</td>"
                    f"<td>{a['threshold']}</td></tr>" for a in alarms)
    return ("<h2>Guardrail alarms</h2><table><tr><th>step</th><th>signal</th><th>value</th><th>threshold</th></tr>"
            f"{cells}</table>")


def _table(before: dict[str, Any], after: dict[str, Any], key: str) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{before[key].get(name, 0):.1%}</td><td>{after[key].get(name, 0):.1%}</td></tr>"
        for name in sorted(set(before[key]) | set(after[key]))
    )
    return f"<table><tr><th>{key.replace('by_', '')}</th><th>before</th><th>after</th></tr>{rows}</table>"


def _population(events: list[dict[str, Any]], shown: int = 3, children: int = 4) -> str:
    """eva: the first and last evolutions, each seed with its informativeness and the prompts it became."""
    if not events:
        return ""
    picked = events if len(events) <= 2 * shown else events[:shown] + events[-shown:]
    rows = []
    for event in picked:
        for seed in event["seeds"]:
            made = [c["prompt"] for c in event["children"] if c["parent"] == seed["prompt"]][:children]
            rows.append(f"<tr><td>{event['step']}</td><td>{event['generation']}</td>"
                        f"<td>{html.escape(seed['prompt'])}</td><td>{seed['informativeness']:.2f}</td>"
                        f"<td>{'<br>'.join(html.escape(m) for m in made) or '(none kept)'}</td></tr>")
    latest = ", ".join(f"generation {g}: {v:.2f}" for g, v in events[-1]["informativeness_by_generation"].items())
    return (f"<h2>Prompt population</h2><p>{len(events)} evolutions; pool of {events[-1]['pool_size']} prompts. "
            f"Mean informativeness at the last evolution: {latest}.</p>"
            "<table><tr><th>step</th><th>generation</th><th>seed prompt</th><th>informativeness</th>"
            f"<th>evolved into</th></tr>{''.join(rows)}</table>")


def _comas(comas: dict[str, Any] | None) -> str:
    """CoMAS: each agent's held-out accuracy alone, and the agents' discussion, before and after training."""
    if comas is None:
        return ""
    before, after = comas["before"], comas["after"]
    rows = [(f"agent {i} alone", b, a) for i, (b, a) in enumerate(zip(before["agents"], after["agents"]))]
    rows += [(f"discussion: {key.replace('_', ' ')}", before["discussion"][key], after["discussion"][key])
             for key in ("accuracy", "first_round_accuracy", "majority_accuracy", "final_share", "grade_parse_rate")
             if key in before["discussion"]]
    cells = "".join(f"<tr><td>{html.escape(name)}</td><td>{b:.1%}</td><td>{a:.1%}</td></tr>" for name, b, a in rows)
    return (f"<h2>CoMAS</h2><p>Discussion accuracy is the vote of the last round's answers; final share, the share "
            f"of those answers that are right.</p>"
            f"<table><tr><th></th><th>before</th><th>after</th></tr>{cells}</table>")


def _sandbox(isolation: str | None) -> str:
    """Where model-written code ran (runs that ran none have no such line); the unisolated opt-out stands out."""
    if isolation is None:
        return ""
    warning = " <b>(no isolation: opted out with unsafe_rlimits)</b>" if isolation == "unsafe_rlimits" else ""
    return f"\n<p>Model-written code ran in the sandbox under <b>{html.escape(isolation)}</b>{warning}.</p>"


def write_report(run_dir: Path) -> Path:
    rows = _read_jsonl(run_dir / "metrics.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    before, after = summary["eval_before"], summary["eval_after"]
    label = summary.get("heldout_label", "held-out")  # what the accuracy measures (test-time, self-play)
    images = [_reward_plot(rows), _web_plot(rows), _accuracy_plot(summary["evals"]), _curriculum_plot(rows),
              _stages_plot(rows), _guardrails_plot(rows)]
    body = "".join(f'<img src="data:image/png;base64,{image}">' for image in images if image is not None)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>autotelic run {html.escape(run_dir.name)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}} img{{display:block;margin:1em 0}}
table{{border-collapse:collapse;display:inline-table;margin-right:2em}} td,th{{border:1px solid #ccc;padding:2px 8px}}</style>
</head><body><h1>autotelic run {html.escape(run_dir.name)}</h1>
<p>{html.escape(label[:1].upper() + label[1:])} accuracy (greedy, strict 0/1 per task, {summary['heldout_tasks']} tasks):
<b>{before['accuracy']:.1%} &rarr; {after['accuracy']:.1%}</b>
in {summary['steps']} steps, {summary['wall_seconds'] / 60:.1f} minutes.</p>{_sandbox(summary.get('sandbox'))}
{_table(before, after, 'by_family')}{_table(before, after, 'by_level')}{_comas(summary.get('comas'))}
{_alarms(summary.get('guardrail_alarms'))}
{body}{_population(_read_jsonl(run_dir / "population.jsonl"))}</body></html>"""
    path = run_dir / "report.html"
    path.write_text(page)
    return path
