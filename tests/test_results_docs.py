"""Every figure docs/results.md quotes traces to a committed artifact: each section names its artifact (which
exists and holds the command, revision, machine, rows and comparisons), its command is the artifact's, and every
comparison and ratio it quotes by name is the artifact's, as rounded in the text."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
RESULTS = ROOT / "docs" / "results.md"
ARTIFACT = re.compile(r"bench/results/[\w.-]+\.json")
NUMBER = r"([-+]?\d+(?:\.\d+)?)"
PRINTED_AS = {"time_to_accuracy_vs_trl": ("ratio", "median")}
"""Names a bench prints for a summary field stored under another key."""


def _sections() -> list[tuple[str, str]]:
    """(heading, body) of each ``## `` section that names an artifact."""
    parts = re.split(r"(?m)^## ", RESULTS.read_text())[1:]
    sections = [(part.split("\n", 1)[0], part.split("\n", 1)[1]) for part in parts]
    return [(heading, body) for heading, body in sections if ARTIFACT.search(body)]


def _load(path: str) -> dict:
    artifact = ROOT / path
    assert artifact.is_file(), f"{path} is named in the docs but not committed"
    data = json.loads(artifact.read_text())
    assert {"command", "revision", "machine", "rows", "comparisons", "summary"} <= data.keys(), path
    return data


def _without_runs_dir(command: str) -> str:
    """The command less its runs directory, its script named from the checkout's root (a bench started from
    bench/ wrote ``python decoding.py`` before artifacts named scripts that way), quoted over several lines or not."""
    command = re.sub(r" --runs-dir \S+", "", " ".join(command.split()))
    return re.sub(r"^python (\w+\.py)", lambda m: f"python bench/{m.group(1)}" if (ROOT / "bench" / m.group(1)).is_file()
                  else m.group(0), command)


def test_every_artifact_the_docs_name_is_committed_and_complete():
    named = set(ARTIFACT.findall(RESULTS.read_text())) | set(ARTIFACT.findall((ROOT / "bench/RESULTS.md").read_text()))
    assert named
    for path in named:
        _load(path)


@pytest.mark.parametrize("heading, body", _sections(), ids=[h.split(":")[0] for h, _ in _sections()])
def test_a_sections_command_comparisons_and_ratios_are_its_artifacts(heading, body):
    artifacts = [_load(path) for path in ARTIFACT.findall(body)]
    commands = {_without_runs_dir(a["command"]) for a in artifacts}
    quoted = {_without_runs_dir(c) for c in re.findall(r"`(python bench/[^`]+)`", heading + "\n" + body)}
    assert quoted and set(quoted) <= commands, f"commands quoted {quoted}, artifacts' {commands}"
    checked = 0
    starts = [match.start() for match in ARTIFACT.finditer(body)]
    for index, artifact in enumerate(artifacts):  # each artifact's figures follow its mention, up to the next one
        body_of = body[(starts[index] if index else 0):(starts[index + 1] if index + 1 < len(starts) else None)]
        for comparison in artifact["comparisons"]:  # `name: gain_points=+X`, 95% CI a to b; or `name: +X points`
            found = re.search(rf"`{re.escape(comparison['name'])}[:=][^`]*?{NUMBER}[^`]*`"
                              rf"[^`]*?{NUMBER}\s+to\s+{NUMBER}", body_of)
            if found is None:
                continue
            gain, low, high = map(float, found.groups())
            assert gain == round(comparison["gain_points"], 1), (comparison, found.group(0))
            assert [low, high] == [round(v, 1) for v in comparison["ci95"]], (comparison, found.group(0))
            checked += 1
        summary = artifact["summary"]
        printed = {name: summary[key][field] for name, (key, field) in PRINTED_AS.items() if key in summary}
        for name, value in {**summary, **summary.get("ratios", {}), **printed}.items():  # `name=X` (95% CI a-b)
            value = value["value"] if isinstance(value, dict) and "value" in value else value
            found = re.search(rf"`{re.escape(name)}={NUMBER}`", body_of)
            if found is None or not isinstance(value, (int, float)):
                continue
            decimals = len(found.group(1).split(".")[1]) if "." in found.group(1) else 0
            assert float(found.group(1)) == round(value, decimals), (name, value, found.group(0))
            checked += 1
    quotes_a_figure = re.search(r"`[a-z_]+(?:=|: )[-+]?\d", body)
    assert checked or not quotes_a_figure, f"{heading}: quotes figures no artifact field matched"


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


@pytest.mark.parametrize("heading, body", _sections(), ids=[h.split(":")[0] for h, _ in _sections()])
def test_every_accuracy_a_section_quotes_is_in_its_artifacts(heading, body):
    """Each percentage with a decimal (an accuracy, a share) is a value of the section's artifacts, as a fraction
    or in points, rounded as printed."""
    numbers = [n for path in ARTIFACT.findall(body) for n in _numbers(_load(path))]
    for text in re.findall(r"(\d+\.\d)%", body):
        quoted = float(text)
        assert any(round(n * 100, 1) == quoted or round(n, 1) == quoted for n in numbers), \
            f"{heading.split(':')[0]}: {text}% is in no artifact"
