"""The web agent's action language: ``click(3)``, ``type(5, "Ada")``, ``select(7, "19:00")``,
``scroll(down)``, ``goto("/shop/")``, ``back()``, ``answer("8.50")``.

Read leniently, because a small model's first attempts rarely match a grammar exactly: the first
action call in the reply counts, quotes are optional, ``click [3]`` reads as ``click(3)``, and an element
may be named by its label instead of its number (``click("Blue Mug")``, ``click "Blue Mug"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACTIONS = ("click", "type", "select", "scroll", "goto", "back", "answer")
ACTION_HELP = (
    'Reply with one action: click(N), type(N, "text"), select(N, "option"), scroll(down), scroll(up), '
    'goto("/path"), back(), or answer("text") when the task is done or asks a question. '
    'N is the number in brackets, or the element\'s name in quotes: click("Home").'
)

_CALL = re.compile(r"\b(" + "|".join(ACTIONS) + r")\s*(\(|\[(\d+)\]|(?=[\"']))", re.IGNORECASE)
_NEEDS_ELEMENT = {"click", "type", "select"}


class ActionError(ValueError):
    """A reply that is not a readable action; the message is shown to the agent."""


@dataclass(frozen=True)
class Action:
    kind: str
    element: int | None = None
    text: str = ""
    label: str = ""  # the element named by its label rather than its number

    def __str__(self) -> str:
        args = [str(self.element)] if self.element is not None else ['"' + self.label + '"'] if self.label else []
        if self.text or self.kind in ("type", "answer", "goto", "select"):
            args.append('"' + self.text.replace('"', "'") + '"')
        if self.kind == "scroll":
            args = [self.text]
        return f"{self.kind}({', '.join(args)})"


def _arguments(text: str) -> list[str]:
    """Comma-separated arguments up to the closing parenthesis (or the end of the reply); quoted ones may
    hold commas and parentheses."""
    args, i = [], 0
    while i < len(text):
        while i < len(text) and text[i] in " \t\n,":
            i += 1
        if i >= len(text) or text[i] == ")":
            break
        if text[i] in "\"'`":
            close = text.find(text[i], i + 1)
            close = len(text) if close < 0 else close
            args.append(text[i + 1:close])
            i = close + 1
            continue
        stop = min((j for j in (text.find(",", i), text.find(")", i)) if j >= 0), default=len(text))
        args.append(text[i:stop].strip())
        i = stop
    return args


def parse_action(reply: str) -> Action:
    """The first action in ``reply``; ``ActionError`` says what is wrong when there is none."""
    match = _CALL.search(reply)
    if match is None:
        raise ActionError(f"no action found. {ACTION_HELP}")
    kind = match.group(1).lower()
    args = [match.group(3)] if match.group(3) else _arguments(reply[match.end():])
    if kind in _NEEDS_ELEMENT:
        head = args[0].strip("[] ") if args else ""
        if not head:
            raise ActionError(f'{kind} needs an element number or name first, as in {kind}(3) or {kind}("Home")')
        if kind in ("type", "select") and len(args) < 2:
            raise ActionError(f'{kind} needs a text after the element, as in {kind}({args[0]}, "...")')
        text = args[1] if len(args) > 1 and kind != "click" else ""
        return Action(kind, int(head), text) if head.isdigit() else Action(kind, None, text, label=head)
    text = args[0] if args else ""
    if kind == "scroll":
        direction = text.lower() or "down"
        if direction not in ("up", "down"):
            raise ActionError("scroll takes down or up")
        return Action(kind, text=direction)
    if kind == "goto" and not text:
        raise ActionError('goto needs a path, as in goto("/shop/")')
    return Action(kind, text=text)
