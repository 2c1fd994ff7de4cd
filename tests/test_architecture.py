"""The import layers of src/autotelic, read from the source with ast (no model, nothing imported).

Every import counts, at module level or inside a function; only ``if TYPE_CHECKING:`` blocks are exempt. A
unit is a subpackage or top-level module of autotelic (``tasks``, ``text``; ``__init__`` for the package's
own). A unit imports units of lower layers only; units of one layer may import each other without a circle.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "autotelic"

LAYERS: tuple[tuple[str, ...], ...] = (  # bottom first
    ("types", "text", "abilities", "checkpoint", "registry", "algorithms", "micro_batches", "errors",
     "user_code"),  # data, pure helpers; what stops a run, and a user's failing code told in one line
    ("config",),
    ("sandbox", "backends", "report"),
    ("value_model",),  # a model over the backends' files: rewards read it as a process reward, search as a guide
    ("web",),  # the local sites' seed content and the agent's action language: web tasks and envs share them
    ("tasks",),
    ("rewards",),
    ("envs",),
    ("heldout", "loading", "recipes", "guardrails"),  # loading: a recipe (or a shipped one, recipes) with its
                                                      # environment's defaults
    ("curricula",),
    ("turn_credit",),  # a turn's advantage from its episode's per-turn rewards and the states it was taken from
    ("rollout", "update", "search", "evaluation", "dist", "vm_mcts", "win_rate"),
    ("modes",),  # generation modes as plug-ins: each builds its generator from the layers below
    ("checks", "build", "run_state", "run_log", "run_evaluation", "divergence", "interrupt", "stopping",
     "trainer"),  # training: knows every part
    ("targets", "python_api", "cli", "__init__"),  # entry points
)
TRAINING = next(index for index, layer in enumerate(LAYERS) if "trainer" in layer)
THIRD_PARTY_HOMES = {"vllm": "backends", "ray": "dist"}  # imported only there


@dataclass(frozen=True)
class Import:
    path: str  # the importing file, relative to src/autotelic
    line: int
    module: str  # the imported module, absolute

    @property
    def unit(self) -> str:
        return unit_of(self.path)

    @property
    def target(self) -> str | None:
        """The imported unit of autotelic, or None for a module outside it."""
        parts = self.module.split(".")
        if parts[0] != "autotelic":
            return None
        return parts[1] if len(parts) > 1 else "__init__"

    def __str__(self) -> str:
        return f"src/autotelic/{self.path}:{self.line} imports {self.module}"


def unit_of(path: str) -> str:
    first = path.split("/")[0]
    return first.removesuffix(".py")


def _type_checking(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node`` except the bodies of ``if TYPE_CHECKING:`` (their ``else`` counts)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if isinstance(child, ast.If) and _type_checking(child):
            for other in child.orelse:
                yield other
                yield from _walk(other)
        else:
            yield from _walk(child)


def _modules(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([base] if base else []))
    if base == "autotelic":  # ``from autotelic import tasks`` imports the unit tasks
        return [f"autotelic.{alias.name}" if _is_unit(alias.name) else "autotelic" for alias in node.names]
    return [base]


def _is_unit(name: str) -> bool:
    return (SRC / name).is_dir() or (SRC / f"{name}.py").is_file()


def imports_of(path: Path) -> list[Import]:
    relative = path.relative_to(SRC).as_posix()
    package = ".".join(["autotelic", *relative.split("/")[:-1]])
    found = []
    for node in _walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += [Import(relative, node.lineno, module) for module in _modules(node, package)]
    return found


def source_files() -> list[Path]:
    return sorted(path for path in SRC.rglob("*.py") if "__pycache__" not in path.parts)


ALL = [found for path in source_files() for found in imports_of(path)]
LAYER = {unit: index for index, layer in enumerate(LAYERS) for unit in layer}


def test_every_unit_has_one_layer():
    units = {unit_of(path.relative_to(SRC).as_posix()) for path in source_files()}
    placed = [unit for layer in LAYERS for unit in layer]
    assert len(placed) == len(set(placed)), "a unit is in two layers"
    assert not units - set(placed), f"place {sorted(units - set(placed))} in LAYERS of tests/test_architecture.py"
    assert not set(placed) - units, f"{sorted(set(placed) - units)} no longer exist: remove them from LAYERS"


def test_imports_point_down_the_layers():
    upward = [f"{found}: {found.unit} (layer {LAYER[found.unit]}) may not import {found.target} (layer "
              f"{LAYER[found.target]})" for found in ALL
              if found.target is not None and found.target in LAYER and found.unit in LAYER
              and LAYER[found.target] > LAYER[found.unit]]
    assert not upward, "imports running up the layers:\n" + "\n".join(upward)


def _circle(edges: dict[str, dict[str, Import]]) -> list[Import] | None:
    """One circle of the unit graph, as the imports along it, or None."""
    done: set[str] = set()

    def visit(unit: str, path: list[str]) -> list[Import] | None:
        if unit in path:
            loop = path[path.index(unit):] + [unit]
            return [edges[a][b] for a, b in zip(loop, loop[1:])]
        if unit in done:
            return None
        for target in sorted(edges.get(unit, {})):
            if (circle := visit(target, path + [unit])) is not None:
                return circle
        done.add(unit)
        return None

    for unit in sorted(edges):
        if (circle := visit(unit, [])) is not None:
            return circle
    return None


def test_no_import_circle_between_units():
    edges: dict[str, dict[str, Import]] = {}
    for found in ALL:
        if found.target not in (None, found.unit):
            edges.setdefault(found.unit, {}).setdefault(found.target, found)
    circle = _circle(edges)
    assert circle is None, "import circle:\n" + "\n".join(map(str, circle or []))


STANDARD_LIBRARY = set(sys.stdlib_module_names) | {"__future__"}


def test_algorithms_import_only_torch_and_the_standard_library():
    """Besides autotelic.registry (its names), which imports only the standard library itself."""
    allowed = STANDARD_LIBRARY | {"torch"}
    strays = [str(found) for found in ALL if found.unit == "algorithms"
              and found.target not in ("algorithms", "registry") and found.module.split(".")[0] not in allowed]
    assert not strays, "algorithms/ is pure tensor code:\n" + "\n".join(strays)


def test_the_registry_imports_only_the_standard_library():
    strays = [str(found) for found in ALL
              if found.unit == "registry" and found.module.split(".")[0] not in STANDARD_LIBRARY]
    assert not strays, "registry.py is used by every layer, algorithms/ included:\n" + "\n".join(strays)


def test_rollout_imports_no_trainer_or_builder():
    above = {unit for layer in LAYERS[TRAINING:] for unit in layer}
    strays = [str(found) for found in ALL if found.unit == "rollout" and found.target in above]
    assert not strays, "rollout/ knows its stages only, not who builds or runs them:\n" + "\n".join(strays)


@pytest.mark.parametrize("package", sorted(THIRD_PARTY_HOMES))
def test_a_distributed_library_is_imported_only_in_its_home(package):
    home = THIRD_PARTY_HOMES[package]
    strays = [str(found) for found in ALL if found.module.split(".")[0] == package and found.unit != home]
    assert not strays, f"{package} is imported only in {home}/:\n" + "\n".join(strays)


def test_every_source_file_holds_one_concept_and_the_loop_reads_in_one_sitting():
    """Issue 21's sizes: a module over 400 lines is doing more than one thing; the loop fits under 250."""
    lines = {path.relative_to(SRC).as_posix(): len(path.read_text().splitlines()) for path in source_files()}
    assert {path: count for path, count in lines.items() if count > 400} == {}
    assert lines["trainer.py"] < 250
