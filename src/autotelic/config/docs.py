"""Each config key's one-line documentation, read from the attribute docstrings under the dataclass fields (the
config's only documentation, so ``autotelic config`` can never disagree with it)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import textwrap
from functools import cache
from typing import Any

from autotelic.config.rules import ConfigError
from autotelic.config.run import RunConfig


@cache
def field_docs(cls: type, whole: bool = False) -> dict[str, str]:
    """Field name -> the first sentence (``whole``: all) of the string literal right under its annotated
    assignment."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for field_node, doc_node in zip(body, body[1:]):
        if (isinstance(field_node, ast.AnnAssign) and isinstance(field_node.target, ast.Name)
                and isinstance(doc_node, ast.Expr) and isinstance(doc_node.value, ast.Constant)
                and isinstance(doc_node.value.value, str)):
            text = " ".join(doc_node.value.value.split())
            docs[field_node.target.id] = text if whole else first_sentence(text)
    return docs


def first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    return re.split(r"(?<=[a-z0-9)]\.)\s+(?=[A-Z])", flat, maxsplit=1)[0]  # not at "e.g. 0.1" or "e.g. 5"


def describe(config: Any, indent: str = "", *, defaults: Any = None, within: tuple[str, ...] = (),
             path: str = "") -> list[str]:
    """``config`` as YAML lines (loadable as a recipe), each key followed by its documentation as a comment;
    only the keys that differ from ``defaults`` and lie within the dotted sections or keys ``within``, where
    given, with the headers of the sections holding them."""
    lines, docs = [], field_docs(type(config))
    for item in dataclasses.fields(config):
        key, value, doc = f"{path}{item.name}", getattr(config, item.name), docs.get(item.name)
        default = None if defaults is None else getattr(defaults, item.name)
        selected = not within or any(key == wanted or key.startswith(f"{wanted}.") for wanted in within)
        comment = f"  # {doc}" if doc else ""
        if dataclasses.is_dataclass(value):
            if selected or any(wanted.startswith(f"{key}.") for wanted in within):
                inner = describe(value, indent + "  ", defaults=default, within=within, path=f"{key}.")
                lines += [f"{indent}{item.name}:{comment}", *inner] if inner else []
        elif selected and (defaults is None or value != default):  # JSON is YAML, on one line
            lines.append(f"{indent}{item.name}: {_yaml(value)}{comment}")
    return lines


def config_paths(config: Any, path: str = "") -> list[str]:
    """Every dotted section and key of ``config``."""
    found = []
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        found.append(f"{path}{item.name}")
        if dataclasses.is_dataclass(value):
            found += config_paths(value, f"{path}{item.name}.")
    return found


def check_paths(config: Any, wanted: list[str]) -> None:
    """Each of ``wanted`` names a section or key of ``config``, or a ConfigError names the valid ones where it
    first goes astray."""
    known = config_paths(config)
    for path in wanted:
        parts = path.split(".")
        for depth in range(1, len(parts) + 1):
            prefix, parent = ".".join(parts[:depth]), ".".join(parts[:depth - 1])
            if prefix not in known:
                here = [name.rpartition(".")[2] for name in known if name.rpartition(".")[0] == parent]
                if not here:
                    raise ConfigError(f"config key '{parent}' is a value, not a section: show it as {parent}")
                where = f"in {parent}" if parent else "at top level"
                raise ConfigError(f"unknown config section or key '{prefix}'; valid {where}: "
                                  f"{', '.join(here)}")


def _yaml(value: Any) -> str:
    if isinstance(value, float) and "e" in repr(value) and "." not in repr(value):
        mantissa, exponent = repr(value).split("e")  # PyYAML (YAML 1.1) reads 2e-05 as text, 2.0e-05 as a float
        return f"{mantissa}.0e{exponent}"
    if isinstance(value, list):  # a list of dataclasses (filter.rewards) as mappings
        value = [dataclasses.asdict(entry) if dataclasses.is_dataclass(entry) else entry for entry in value]
    return json.dumps(value)


def describe_run_config(config: RunConfig) -> str:
    return "\n".join(describe(config)) + "\n"


def reference(config: Any, key: str = "") -> list[str]:
    """Markdown: one table per section (its own sections after it), each key with its value and documentation."""
    rows, sections, docs = [], [], field_docs(type(config), whole=True)
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value):
            sections.append((f"{key}{item.name}", value))
        else:
            doc = docs.get(item.name, "").replace("|", "\\|")
            rows.append(f"| `{item.name}` | `{_yaml(value)}` | {doc} |")
    lines = []
    if rows:
        about = " ".join((inspect.getdoc(type(config)) or "").split()) if dataclasses.is_dataclass(config) else ""
        lines += [f"## `{key.rstrip('.')}`", "", *([about, ""] if about and not about.startswith(type(config).__name__)
                                                     else []),
                  "| key | default | what it does |", "| --- | --- | --- |", *rows, ""]
    for name, section in sections:
        lines += reference(section, f"{name}.")
    return lines


def markdown_reference(config: RunConfig) -> str:
    """docs/config.md: every key of ``config`` with its value and documentation, by section."""
    return "\n".join(["# Configuration reference", "",
                      "Every key, its default and what it does, by section; generated from the config's dataclasses "
                      "by `autotelic config --markdown` (the same documentation `autotelic config` prints as "
                      "comments). Set a key in a recipe or as a dotted override: `autotelic run tree.branches=4`.",
                      "", *reference(config)]).rstrip() + "\n"
