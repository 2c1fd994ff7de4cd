"""Tool use: the policy calls tools with function-calling JSON, then answers; the task's verifier pays the answer.

A turn that parses as a tool call is executed and its result becomes the next observation; any other
turn is the final answer. Calls use the Hermes/Qwen format (``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>``); a bare JSON object with a name is accepted too, as are Llama's ``parameters`` and
OpenAI's ``{"function": {"name", "arguments": "<json string>"}}`` spellings.

Prompting: the embedded SmolLM2's chat template ignores ``tools=`` (it renders only role and content),
so the tools are described in plain text by ``tool_prompt`` at the top of the first user message. For a
model whose template renders tools, pass ``tool_schemas(tools)`` as ``apply_chat_template(...,
tools=...)`` instead; the call format it teaches is the one ``parse_tool_call`` reads.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from autotelic.envs import Step
from autotelic.envs.registry import EnvironmentSpec
from autotelic.tasks import get_family
from autotelic.types import Task

if TYPE_CHECKING:
    from autotelic.sandbox import SandboxLimits


class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object (type "object" with properties and required)."""

    def __call__(self, **arguments: Any) -> str: ...


class ToolCallError(ValueError):
    """A turn that tries to call a tool but cannot be read or run; the message is shown to the policy."""


# ---- parsing ------------------------------------------------------------------------------

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _call_from_object(value: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(value, list) and len(value) == 1:  # some templates emit a list of calls
        value = value[0]
    if not isinstance(value, dict):
        raise ToolCallError("a tool call must be a JSON object with 'name' and 'arguments'")
    if isinstance(value.get("function"), dict):  # OpenAI: {"type": "function", "function": {...}}
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise ToolCallError("a tool call needs a 'name' string")
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI sends arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise ToolCallError(f"the arguments of '{name}' are not valid JSON: {error}") from None
    if not isinstance(arguments, dict):
        raise ToolCallError(f"the arguments of '{name}' must be a JSON object")
    return name, arguments


def _decode(text: str) -> Any:
    """The JSON value at the start of ``text``; whatever follows it is ignored."""
    try:
        return json.JSONDecoder().raw_decode(text)[0]
    except json.JSONDecodeError as error:
        raise ToolCallError(f"the tool call is not valid JSON: {error}") from None


def parse_tool_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """The first tool call in ``text`` as (name, arguments); None when the turn calls no tool.

    A ``<tool_call>`` tag, or a turn that is a JSON object on its own, commits to a call: if it cannot
    be read, ``ToolCallError`` says why. A JSON object with a "name" inside prose is a call too.
    """
    tagged = _TAGGED.search(text)
    if tagged is not None:
        return _call_from_object(_decode(tagged.group(1)))
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced is not None:
        stripped = fenced.group(1)
    if stripped.startswith(("{", "[{")):
        return _call_from_object(_decode(stripped))
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and ("name" in value or "function" in value):
            return _call_from_object(value)
    return None


# ---- prompting ----------------------------------------------------------------------------

def tool_schemas(tools: list[Tool]) -> list[dict[str, Any]]:
    """The tools in OpenAI function format, as ``apply_chat_template(tools=...)`` takes them."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters}} for t in tools]


def string_argument(name: str, description: str) -> dict[str, Any]:
    """The JSON schema of a tool's arguments when it takes one string, ``name``."""
    return {"type": "object", "properties": {name: {"type": "string", "description": description}},
            "required": [name]}


def tool_prompt(tools: list[Tool]) -> str:
    """Plain-text tool instructions for the user (or system) message."""
    listing = "\n".join(json.dumps(schema["function"]) for schema in tool_schemas(tools))
    return ("You can use these tools:\n"
            f"{listing}\n"
            "To call a tool, reply with only:\n"
            '<tool_call>{"name": "<tool name>", "arguments": {<arguments>}}</tool_call>\n'
            "The result comes back in the next message. When you know the answer, reply with it and no tool call.")


# ---- the environment ----------------------------------------------------------------------

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,),
}


def check_arguments(tool: Tool, arguments: dict[str, Any]) -> None:
    """Raise ToolCallError unless ``arguments`` fit the tool's schema (names, required, simple types)."""
    properties: dict[str, Any] = tool.parameters.get("properties", {})
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise ToolCallError(f"'{tool.name}' has no argument {', '.join(map(repr, unknown))}; "
                            f"it takes {', '.join(map(repr, properties)) or 'none'}")
    missing = [name for name in tool.parameters.get("required", []) if name not in arguments]
    if missing:
        raise ToolCallError(f"'{tool.name}' needs argument {', '.join(map(repr, missing))}")
    for name, value in arguments.items():
        expected = properties[name].get("type")
        types = _JSON_TYPES.get(expected, (object,))
        # bool is an int subclass in Python but not a JSON number
        if not isinstance(value, types) or (isinstance(value, bool) and expected != "boolean"):
            raise ToolCallError(f"argument '{name}' of '{tool.name}' must be of type {expected}")


@dataclass
class ToolUseEnv:
    """Tool calls until a final answer, scored by the task family's verifier.

    Each tool-call turn's info has ``tool`` (the name called, None if unreadable) and ``ok``; every
    step's info carries the running ``tool_calls``/``tool_successes`` so the last one gives the
    episode's call success rate. A failed call also sets ``valid=False`` (counted as an invalid action).
    Any call attempt past ``max_calls`` ends the episode with reward 0.
    """

    tools: list[Tool]
    max_calls: int = 4
    task: Task | None = field(default=None, init=False)
    calls: int = field(default=0, init=False)
    successes: int = field(default=0, init=False)
    _by_name: dict[str, Tool] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {tool.name: tool for tool in self.tools}

    def reset(self, task: Task) -> str:
        self.task, self.calls, self.successes = task, 0, 0
        return f"{tool_prompt(self.tools)}\n\n{task.prompt}"

    def step(self, action: str) -> Step:
        if self.task is None:
            raise RuntimeError("step() before reset()")
        try:
            call = parse_tool_call(action)
        except ToolCallError as error:
            return self._failed(None, str(error), done=self.calls >= self.max_calls)
        if call is None:  # the final answer; a task without a reference (proposed by the policy) is scored 0
            reward = float(get_family(self.task.family).score(self.task, action)) if self.task.answer else 0.0
            return Step("", reward, True, self._counts({"answered": True, "answer": action}))
        name, arguments = call
        if self.calls >= self.max_calls:
            return self._failed(name, f"no tool calls left (limit {self.max_calls})", done=True)
        tool = self._by_name.get(name)
        if tool is None:
            return self._failed(name, f"unknown tool '{name}'; available: {', '.join(self._by_name)}")
        try:
            check_arguments(tool, arguments)
            result = tool(**arguments)
        except Exception as error:  # a tool's own failure is the policy's feedback, never a crash
            return self._failed(name, str(error) or type(error).__name__)
        self.calls += 1
        self.successes += 1
        if self.calls == self.max_calls:
            result += "\n(No tool calls left: reply with your final answer.)"
        return Step(result, 0.0, False, self._counts({"tool": name, "ok": True}))

    def close(self) -> None:  # holds nothing to release
        pass

    def _failed(self, name: str | None, problem: str, done: bool = False) -> Step:
        self.calls += 1
        return Step(f"Error: {problem}", 0.0, done, self._counts({"tool": name, "ok": False, "valid": False}))

    def _counts(self, info: dict[str, Any]) -> dict[str, Any]:
        return {**info, "tool_calls": self.calls, "tool_successes": self.successes}


# ---- tools --------------------------------------------------------------------------------

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


@dataclass(frozen=True)
class Calculator:
    """Arithmetic on numbers: + - * / // % **, parentheses and signs, evaluated from the syntax tree
    (never ``eval``). Integers stay exact up to ``max_bits``; a power is refused before it is computed
    if its result would be larger, so ``9**9**9`` answers at once."""

    name: str = "calculator"
    description: str = "Evaluate an arithmetic expression with + - * / // % ** and parentheses."
    parameters: dict[str, Any] = field(
        default_factory=lambda: string_argument("expression", "for example (12 + 7) * 3"))
    max_length: int = 300  # deeply nested input would otherwise exhaust the parser's recursion
    max_bits: int = 10_000  # ~3000 digits, within Python's int-to-str limit

    def __call__(self, expression: str) -> str:
        if len(expression) > self.max_length:
            raise ValueError(f"expression longer than {self.max_length} characters")
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except (SyntaxError, RecursionError, MemoryError):
            raise ValueError(f"not an arithmetic expression: {expression!r}") from None
        try:
            value = self._evaluate(tree.body)
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        except OverflowError:
            raise ValueError("result out of floating-point range") from None
        return str(value) if isinstance(value, int) else f"{value:.12g}"

    def _evaluate(self, node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return self._checked(node.value)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self._evaluate(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self._evaluate(node.left), self._evaluate(node.right)
            if isinstance(node.op, ast.Pow):
                self._check_power(left, right)
            return self._checked(_BINARY[type(node.op)](left, right))
        raise ValueError(f"only numbers, + - * / // % ** and parentheses are allowed, not {_describe(node)}")

    def _checked(self, value: int | float | complex) -> int | float:
        if isinstance(value, complex):  # (-8) ** 0.5
            raise ValueError("result is not a real number")
        if isinstance(value, float) and not math.isfinite(value):
            raise OverflowError
        if isinstance(value, int) and value.bit_length() > self.max_bits:
            raise ValueError(f"result too large (over {self.max_bits} bits)")
        return value

    def _check_power(self, base: int | float, exponent: int | float) -> None:
        if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
            if exponent * (abs(base).bit_length() - 1) > self.max_bits:
                raise ValueError(f"result too large (over {self.max_bits} bits)")


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return f"the constant {node.value!r}"
    if isinstance(node, ast.Name):
        return f"the name '{node.id}'"
    if isinstance(node, ast.Attribute):
        return f"attribute access '.{node.attr}'"
    if isinstance(node, ast.Call):
        return "a function call"
    return f"'{type(node).__name__}'"


@dataclass(frozen=True)
class PythonTool:
    """Runs a Python program in the project's sandbox and returns what it printed (cut to ``max_chars``).

    A program that fails comes back as its status and the last lines of stderr, so the policy can fix it.
    """

    name: str = "python"
    description: str = "Run a Python 3 program and return what it prints. Print the result you need."
    parameters: dict[str, Any] = field(default_factory=lambda: string_argument("code", "a complete Python program"))
    limits: SandboxLimits | None = None  # None: the sandbox's defaults
    max_chars: int = 400
    stderr_lines: int = 3

    def __call__(self, code: str) -> str:
        from autotelic.sandbox import SandboxLimits, run_python

        result = run_python(code, limits=self.limits or SandboxLimits())
        if result.ok:
            text = result.stdout.strip() or "(no output: print the result)"
        else:
            tail = "\n".join(result.stderr.strip().splitlines()[-self.stderr_lines:])
            text = f"{result.status} (exit code {result.returncode})" + (f":\n{tail}" if tail else "")
        return text if len(text) <= self.max_chars else text[:self.max_chars] + " ...[truncated]"


def calculator_env() -> ToolUseEnv:
    return ToolUseEnv([Calculator()], max_calls=4)


def python_env() -> ToolUseEnv:
    return ToolUseEnv([PythonTool()], max_calls=3)


TOOL_ENVIRONMENTS = {"calculator": calculator_env, "python": python_env}


def load_environment(tool: str) -> EnvironmentSpec:
    """A tool environment over any family's tasks (the task's verifier pays the final answer)."""
    if tool not in TOOL_ENVIRONMENTS:
        raise ValueError(f"unknown tool environment '{tool}'; valid: {', '.join(TOOL_ENVIRONMENTS)}")
    return EnvironmentSpec(TOOL_ENVIRONMENTS[tool])
