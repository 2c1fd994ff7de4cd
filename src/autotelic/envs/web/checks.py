"""Programmatic checks of a web task: success conditions and progress milestones, read from the site's state.

A task's ``meta`` holds lists of conditions; each is a dict of one kind:
- ``{"answer": "8.50"}``: the agent's final answer matches (numbers compare as numbers, text ignores case);
- ``{"url": "/shop/cart"}``: the agent is on that page (its query string ignored unless given);
- ``{"sql": "SELECT COUNT(*) FROM orders", "params": [...]}``: the query's first value is truthy in the
  episode's own database;
- ``{"field": "Name", "value": "Ada"}``: a control labelled Name on the current page holds that value.
Success needs every ``success`` condition; ``progress`` conditions are milestones, each paid once.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Callable

from autotelic.envs.web.page import Page
from autotelic.text import answer_matches, normalise_answer

_KINDS = ("answer", "url", "sql", "field")


@dataclass
class SiteState:
    page: Page
    values: dict[str, str]  # typed values by XPath
    answer: str | None
    connect: Callable[[], sqlite3.Connection]


def check_condition(condition: dict[str, Any], state: SiteState) -> bool:
    kind = next((k for k in _KINDS if k in condition), None)
    if kind == "answer":
        return state.answer is not None and answer_matches(state.answer, str(condition["answer"]))
    if kind == "url":
        want, path = condition["url"], state.page.path
        return path == want or ("?" not in want and path.split("?")[0] == want)
    if kind == "sql":
        connection = state.connect()
        try:
            row = connection.execute(condition["sql"], condition.get("params", [])).fetchone()
        finally:
            connection.close()
        return bool(row and row[0])
    if kind == "field":
        want = normalise_answer(str(condition["value"]))
        return any(e.label.lower() == condition["field"].lower()
                   and normalise_answer(_shown_value(e, state.values.get(e.xpath, e.value))) == want
                   for e in state.page.elements.values())
    raise ValueError(f"unknown web check {condition}; a condition names one of {', '.join(_KINDS)}")


def _shown_value(element, value: str) -> str:
    """A select's chosen option reads as its text, as the agent sees it."""
    return next((text for v, text in element.options if v == value), value)
