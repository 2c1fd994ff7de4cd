"""Unit tests whose verdict a solution cannot fake by exiting, graded by assertion.

Run as a plain script (solution, tests, ``check(f)``), a program passes when the interpreter exits with status 0,
and a solution that calls ``sys.exit(0)``, ``exit()`` or ``os._exit(0)`` before the tests leaves it with status 0
too: it read as correct. Here the solution and then its tests run inside a harness, each by ``exec`` in one fresh
namespace (``__name__`` is not ``"__main__"``, so a solution's main block does not run, as in HumanEval's own
harness); every exit and exception is caught, and each ``assert`` of the tests is counted on its own (each test
method of unittest TestCase classes, which define tests but run none, is run and counted as one). The
verdict is the last line the harness writes (to a copy of stdout taken before the solution runs), tagged with a
random nonce made for this run, which the solution does not know. No verdict line (the process was killed,
exited from under the harness, or cut its output): nothing passed.

The nonce is in the program's text, so code that reads its own source could forge the line; nothing a model
writes to solve a task does that, and the sandbox still holds whatever it does.
"""

from __future__ import annotations

import ast
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from autotelic.sandbox.process import ExecutionResult
from autotelic.types import Task

HOOK = "__autotelic_assert__"

_HARNESS = """\
import os as _os


def _autotelic_run(solution, tests, nonce, hook):
    out = _os.dup(1)
    results = []

    def count(condition):
        try:
            results.append(bool(condition()))
        except BaseException:  # an exit inside an assertion fails that one; the tests go on
            results.append(False)

    namespace = {"__name__": "__solution__", hook: count}
    finished = 0
    try:
        exec(compile(solution, "solution.py", "exec"), namespace)
        exec(compile(tests, "tests.py", "exec"), namespace)
        finished = 1
    except BaseException:  # SystemExit and KeyboardInterrupt too: a program that exits early has not passed
        pass
    _os.write(out, f"\\n{nonce} {sum(results)} {len(results)} {finished}\\n".encode())


_autotelic_run(%r, %r, %r, %r)
"""


def _is_test_case(node: ast.AST) -> bool:
    """A class deriving from (something named) TestCase: unittest runs it, its asserts fail its test methods."""
    return isinstance(node, ast.ClassDef) and any(
        isinstance(base, ast.Name) and base.id.endswith("TestCase")
        or isinstance(base, ast.Attribute) and base.attr.endswith("TestCase") for base in node.bases)


class _CountAsserts(ast.NodeTransformer):
    """``assert test, msg`` -> ``HOOK(lambda: test)``: a failed assertion is counted, and the tests go on
    (outside TestCase classes, whose methods count as one each); ``written`` counts them."""

    def __init__(self) -> None:
        self.written = 0

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        return node if _is_test_case(node) else self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> ast.Expr:
        self.written += 1
        arguments = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
        call = ast.Call(ast.Name(HOOK, ast.Load()), [ast.Lambda(arguments, node.test)], [])
        return ast.copy_location(ast.Expr(call), node)


@dataclass(frozen=True)
class Verdict:
    passed: int
    """Assertions that held."""
    asserts: int
    """Assertions counted: those that ran (and, when the tests stopped early, one more: asserts in a loop cut
    short by an exit are not all right), or the tests' written ones when fewer ran."""
    finished: bool
    """The tests ran to their end without an exception or an exit."""

    @property
    def fraction(self) -> float:
        """The graded reward: the share of assertions that held (ReST-RL's unit-test reward)."""
        if not self.asserts:
            return float(self.finished)
        return self.passed / self.asserts

    @property
    def passed_all(self) -> bool:
        """Strict correctness, what accuracy counts: every assertion held and the tests finished."""
        return self.finished and self.passed == self.asserts


@dataclass(frozen=True)
class Harnessed:
    program: str
    """What runs in the sandbox."""
    nonce: str
    written_asserts: int

    def verdict(self, result: ExecutionResult) -> Verdict:
        """The run's verdict from its last nonce-tagged line; none: nothing passed."""
        for line in reversed(result.stdout.splitlines()):
            fields = line.split()
            if len(fields) == 4 and fields[0] == self.nonce and all(f.isdigit() for f in fields[1:]):
                passed, ran, finished = map(int, fields[1:])
                return Verdict(passed, max(ran + (not finished), self.written_asserts), bool(finished))
        return Verdict(0, self.written_asserts, False)


# unittest-style tests (BigCodeBench, many repositories): ``class TestCases(unittest.TestCase)`` defines tests but
# runs none, so the harness runs every test method in a suite of its own (class fixtures included) and counts it
# as one assertion: passed when it ran without failure, error or skip.
_UNITTEST_RUNNER = """
import unittest as _autotelic_unittest


def _autotelic_case(case, name):
    result = _autotelic_unittest.TestResult()
    _autotelic_unittest.TestSuite([case(name)]).run(result)
    return result.testsRun == 1 and result.wasSuccessful() and not result.skipped
"""


def _test_methods(tree: ast.Module) -> list[tuple[str, str]]:
    """(class, method) of every ``test*`` method of the module's top-level TestCase subclasses."""
    return [(node.name, item.name) for node in tree.body if _is_test_case(node) for item in node.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test")]


def harness(solution: str, tests: str) -> Harnessed:
    """The harness program for ``solution`` and its ``tests`` (Python that asserts, and calls what it defines,
    e.g. ``def check(candidate): ...`` then ``check(f)``; or unittest TestCase classes, each test method one
    counted assertion). Raises ValueError for tests that are not Python."""
    try:
        tree = ast.parse(tests)
    except SyntaxError as error:
        raise ValueError(f"the tests are not valid Python (line {error.lineno}: {error.msg})") from None
    methods = _test_methods(tree)
    if methods:
        runs = "".join(f"assert _autotelic_case({case}, {name!r})\n" for case, name in methods)
        tree.body += ast.parse(_UNITTEST_RUNNER + runs).body
    transform = _CountAsserts()
    counted = ast.unparse(ast.fix_missing_locations(transform.visit(tree)))
    nonce = secrets.token_hex(16)
    return Harnessed(_HARNESS % (solution, counted, nonce, HOOK), nonce, transform.written)


# Standard-input programs (APPS, Codeforces style): each case runs the program's source afresh as ``__main__`` with
# the case's input as stdin, its printed output compared token by token (whitespace-insensitive) with the expected
# one; ``exit()`` after printing is allowed, an exception fails that case only.
_IO_RUNNER = """\
import contextlib as _contextlib
import io as _io
import sys as _sys


def _autotelic_io(source, given):
    printed, stdin = _io.StringIO(), _sys.stdin
    _sys.stdin = _io.StringIO(given)
    try:
        with _contextlib.redirect_stdout(printed):
            exec(compile(source, "solution.py", "exec"), {"__name__": "__main__"})
    except SystemExit:
        pass
    finally:
        _sys.stdin = stdin
    return printed.getvalue().split()
"""


def io_cases(cell: Any) -> tuple[tuple[str, str], ...] | None:
    """Standard-input cases from a tests cell holding ``{"inputs": [...], "outputs": [...]}`` (or its JSON text);
    None for Python tests or an empty cell; ValueError for an object that is not such cases."""
    if isinstance(cell, str) and cell.lstrip().startswith("{"):
        try:
            cell = json.loads(cell)
        except json.JSONDecodeError:
            return None  # not JSON: Python tests (a dict literal), checked as Python
    if not isinstance(cell, dict):
        return None
    inputs, outputs = cell.get("inputs"), cell.get("outputs")
    if not (isinstance(inputs, list) and isinstance(outputs, list) and inputs and len(inputs) == len(outputs)
            and all(isinstance(x, str) for x in inputs + outputs)):
        raise ValueError('as standard-input cases must be {"inputs": [...], "outputs": [...]}: two lists of texts '
                         'of the same, non-zero length')
    return tuple(zip(inputs, outputs))


def io_harness(program: str, cases: Sequence[Sequence[str]]) -> Harnessed:
    """The harness for a standard-input ``program`` and its (input, expected output) ``cases``: one counted
    assertion per case, so the graded reward is the share of cases passed."""
    checks = "".join(f"assert _autotelic_io({program!r}, {given!r}) == {expected!r}.split()\n"
                     for given, expected in cases)
    return harness("", _IO_RUNNER + checks)


@runtime_checkable
class Tested(Protocol):
    """A task family whose tasks carry unit tests (the ``unit_tests`` reward needs one)."""

    runs_code: bool
    """Whether scoring its tasks runs model-written code, so a run needs the sandbox (a data set's family: whether
    some row has tests)."""

    def tests(self, task: Task, completion: str) -> Harnessed: ...


@runtime_checkable
class ShowsSomeTests(Protocol):
    """A tested family whose prompts show some of its tests (a docstring's example) and that can run only the
    others (``unit_tests`` with ``shown: false``: an answer copying the shown output earns nothing)."""

    def unshown_tests(self, task: Task, completion: str) -> Harnessed: ...


def families_showing_some_tests() -> list[str]:
    """The known families that can run only the tests their prompts do not show, to name in refusals."""
    from autotelic.tasks import family_names, get_family

    return [name for name in family_names() if isinstance(get_family(name), ShowsSomeTests)]


def passes(harnessed: Harnessed) -> float:
    """Strict 0/1: whether the completion passes every test (one sandboxed run)."""
    from autotelic.sandbox import run_python

    return float(harnessed.verdict(run_python(harnessed.program)).passed_all)
