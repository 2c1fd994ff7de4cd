"""Code tasks for creator-executor self-play (``ProposeSampler`` with ``kind="code"``; Absolute Zero's deduction
tasks, Zhao et al. 2025).

The proposer writes a Python function ``f`` and one input (``CODE_INSTRUCTION`` shows the format: a fenced
``def f`` and an ``INPUT:`` line; ``parse_program`` also takes a literal call ``f(...)`` in the reply, another
function name, or no input at all, then the example's). It keeps the function (and imports) and the input's
literal arguments, reading them with ``ast`` only: model code never runs in this process. The sandbox runs
``print(repr(f(input)))`` twice under ``CODE_LIMITS``; the printed value is the label when both runs agree
(AZR's determinism check), else the proposal is invalid, as is one that fails to parse, copies the format
example, raises, times out or prints nothing. The executor is asked what ``f(input)`` returns and is paid 1 for
an answer equal to the label (``answer_matches``); p is its solve rate, and the proposer earns AZR's
learnability 1 - p (0 when p is 0 or 1: no signal) in place of min(p, 1 - p), with the same repetition penalty
and invalid reward. The executor's band works as for arithmetic (``propose.py``), but on a label verified by
execution.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from autotelic.sandbox import Sandbox, SandboxLimits

CODE_EXAMPLE, CODE_EXAMPLE_INPUT = "def f(x):\n    return x * 2 + 1", "3"
CODE_INSTRUCTION = ("Write a new short Python function f and one input to call it with. Use exactly this format:\n"
                    f"```python\n{CODE_EXAMPLE}\n```\nINPUT: {CODE_EXAMPLE_INPUT}\n"
                    "Write a different function. Reply with only the code block and the INPUT line.")
CODE_LIMITS = SandboxLimits(cpu_seconds=1.0, wall_seconds=2.0, memory_mb=256, max_processes=4, output_bytes=1024,
                            file_bytes=2**16)
"""A proposed function runs for a second at most: the executor is meant to trace it in its head."""
_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|$)", re.DOTALL)
_INPUT = re.compile(r"^\W*input\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Program:
    """A proposed code task: the source defining the function, the arguments of the one call as written, and
    the function's name (``f`` unless the proposer named it otherwise)."""

    source: str
    args: str
    name: str = "f"

    def question(self) -> str:
        return (f"Given this code:\n```python\n{self.source}\n```\nWhat does {self.name}({self.args}) return? "
                "Reply with only the value.")

    def script(self) -> str:
        return f"{self.source}\nprint(repr({self.name}({self.args})))"


def parse_program(text: str, example: str = CODE_EXAMPLE) -> Program | None:
    """The program of a code proposal, read with ``ast`` (nothing runs): from the first fenced block, else from
    the first ``def``, the top-level function ``f``, else the first top-level function, with the module's imports
    (trailing lines that break the syntax, as in a reply cut off mid-line, are dropped); and the literal arguments
    of the ``INPUT:`` line, else of the first literal call of the function in the reply, else the example's
    input (none if the function takes none): the 135M model seldom writes the line, and a new function with
    a default input still proposes a task. None when no function is found, when it has the example's
    parameters and body, or when the ``INPUT:`` line is there but holds no literals."""
    fenced = _FENCE.search(text)
    code = fenced.group(1) if fenced else text[text.find("def "):] if "def " in text else ""
    module = _parse_prefix(code)
    functions = [node for node in module.body if isinstance(node, ast.FunctionDef)] if module else []
    function = next((node for node in functions if node.name == "f"), functions[0] if functions else None)
    if module is None or function is None or _behaviour(function) == _behaviour(ast.parse(example).body[0]):
        return None
    source = "\n".join(ast.get_source_segment(code, node) or "" for node in module.body
                       if node is function or isinstance(node, ast.Import | ast.ImportFrom))
    line = _INPUT.search(text)
    if line:
        args = _literal_args(line.group(1).strip(" *`"))
        return Program(source, args, function.name) if args is not None else None
    calls = (_literal_args((ast.get_source_segment(code, node) or "")[len(function.name) + 1:-1])
             for node in ast.walk(module) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == function.name)
    default = CODE_EXAMPLE_INPUT if function.args.posonlyargs or function.args.args else ""
    return Program(source, next((args for args in calls if args), default), function.name)


def _behaviour(function: ast.FunctionDef) -> str:
    """A function's parameters and body, not its name: a renamed copy of the example is still a copy."""
    return ast.dump(function.args) + "".join(ast.dump(node) for node in function.body)


def _parse_prefix(code: str) -> ast.Module | None:
    lines = code.splitlines()
    for end in range(len(lines), 0, -1):
        try:
            return ast.parse("\n".join(lines[:end]))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return None


def _literal_args(args: str) -> str | None:
    """``args`` when it is one or more comma-separated Python literals (checked without running anything)."""
    try:
        ast.literal_eval(f"({args},)")
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None
    return args.strip()


def label_programs(sandbox: Sandbox, programs: list[Program]) -> list[str | None]:
    """What each program's call printed, run twice in the sandbox: None unless both runs succeeded and
    printed the same non-empty last line (a program using randomness or the clock labels nothing)."""
    results = sandbox.map([p.script() for p in programs] * 2)
    labels = []
    for first, second in zip(results[:len(programs)], results[len(programs):]):
        lines = first.stdout.strip().splitlines()
        same = first.ok and second.ok and first.stdout == second.stdout
        labels.append(lines[-1] if same and lines else None)
    return labels


def answer_matches(reply: str, label: str) -> bool:
    """Whether an executor's reply states ``label``: its last `backticked` span, else its first line, equal as
    Python literals when both read as one (``==``, as AZR compares values: 3 == 3.0, '[1,2]' == '[1, 2]'), else
    as text with whitespace collapsed and outer quotes dropped (an unquoted string answer counts)."""
    reply = reply.replace("```python", "").replace("```", "").strip()
    spans = re.findall(r"`([^`]+)`", reply)
    answer = spans[-1] if spans else (reply.splitlines() or [""])[0]
    answer = answer.strip().rstrip(".").strip()
    try:
        return bool(ast.literal_eval(answer) == ast.literal_eval(label))
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        pass

    def plain(text: str) -> str:
        return " ".join(text.split()).strip("'\"")

    return bool(answer) and plain(answer) == plain(label)

