"""A page as the agent reads it: cleaned-DOM text with numbered interactive elements.

Both drivers (plain HTTP and the real browser) hand over HTML and the env turns it into a ``Page`` here, so
the two modes give the same observation of the same page by construction. Form values the agent typed
live in the env (keyed by the element's XPath), not in the HTML, and are rendered beside their control.

An observation looks like::

    URL: /shop/product/3
    # Blue Mug
    [1] link "Home" [2] link "Shop"
    Price: $8.50
    [3] input "Quantity" = "1"
    [4] button "Add to cart"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

import lxml.html

_SKIPPED = {"head", "script", "style", "template", "noscript"}
_BLOCKS = {"address", "article", "aside", "blockquote", "body", "dd", "div", "dl", "dt", "fieldset", "figure",
           "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p",
           "pre", "section", "table", "tbody", "td", "th", "thead", "tr", "ul", "br"}
_HEADINGS = {"h1": "# ", "h2": "## ", "h3": "### "}
_BUTTON_INPUTS = {"submit", "button", "reset", "image"}
_TEXT_PREVIEW = 60  # characters of a textarea's text shown in the observation


@dataclass(frozen=True)
class Element:
    """One interactive element: a link, a button or a form control."""

    index: int  # the number the agent refers to
    kind: str  # link, button, input, textarea, select, checkbox
    label: str
    xpath: str  # locates it in the browser and keys typed values
    href: str | None = None
    name: str | None = None  # the form field name
    value: str = ""  # the value in the HTML (a default, or a button's submitted value)
    options: tuple[tuple[str, str], ...] = ()  # select: (value, text) pairs
    form: str | None = None  # XPath of the form it belongs to


@dataclass
class Page:
    url: str  # absolute
    title: str
    lines: list[str | list[str | int]]  # each line: text pieces and element indices, in reading order
    elements: dict[int, Element] = field(default_factory=dict)
    forms: dict[str, list[int]] = field(default_factory=dict)  # form XPath -> its controls' indices
    methods: dict[str, tuple[str, str]] = field(default_factory=dict)  # form XPath -> (method, action)
    hidden: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # form XPath -> hidden (name, value)s

    @property
    def path(self) -> str:
        """The URL without its origin: what the agent sees and may ``goto``."""
        parts = urlsplit(self.url)
        return parts.path + (f"?{parts.query}" if parts.query else "")


def _text(node: lxml.html.HtmlElement) -> str:
    return " ".join(node.text_content().split())


def _label_of(node: lxml.html.HtmlElement, labels: dict[str, str]) -> str:
    for candidate in (labels.get(node.get("id", "")), node.get("aria-label"), node.get("placeholder"),
                      node.get("title"), node.get("name")):
        if candidate:
            return candidate
    return ""


def _element(node: lxml.html.HtmlElement, index: int, tree, labels: dict[str, str]) -> Element | None:
    tag, xpath = node.tag, tree.getpath(node)
    form = next((tree.getpath(a) for a in node.iterancestors("form")), None)
    if tag == "a":
        return Element(index, "link", _text(node) or node.get("title", ""), xpath, href=node.get("href"))
    if tag == "button":
        return Element(index, "button", _text(node), xpath, name=node.get("name"), value=node.get("value", ""),
                       form=form)
    if tag == "select":
        options = tuple((o.get("value", _text(o)), _text(o)) for o in node.iter("option"))
        chosen = next((o.get("value", _text(o)) for o in node.iter("option") if o.get("selected") is not None),
                      options[0][0] if options else "")
        return Element(index, "select", _label_of(node, labels), xpath, name=node.get("name"), value=chosen,
                       options=options, form=form)
    if tag == "textarea":
        return Element(index, "textarea", _label_of(node, labels), xpath, name=node.get("name"),
                       value=node.text or "", form=form)
    kind = (node.get("type") or "text").lower()
    if kind == "hidden":
        return None
    if kind in _BUTTON_INPUTS:
        return Element(index, "button", node.get("value") or kind, xpath, name=node.get("name"),
                       value=node.get("value", ""), form=form)
    if kind in ("checkbox", "radio"):
        return Element(index, "checkbox", _label_of(node, labels), xpath, name=node.get("name"),
                       value="on" if node.get("checked") is not None else "", form=form)
    return Element(index, "input", _label_of(node, labels), xpath, name=node.get("name"),
                   value=node.get("value", ""), form=form)


def parse_page(html: str, url: str) -> Page:
    """The page's text and interactive elements, numbered from 1 in document order."""
    root = lxml.html.document_fromstring(html or "<html></html>")
    tree = root.getroottree()
    title = _text(root.find(".//title")) if root.find(".//title") is not None else ""
    labels = {label.get("for"): _text(label) for label in root.iter("label") if label.get("for")}
    page = Page(url, title, [])
    line: list[str | int] = []

    def flush() -> None:
        nonlocal line
        if any(not isinstance(piece, str) or piece.strip() for piece in line):
            page.lines.append(line)
        line = []

    def add_text(text: str | None) -> None:
        if text and text.strip():
            line.append(" ".join(text.split()))

    def walk(node: lxml.html.HtmlElement) -> None:
        tag = node.tag if isinstance(node.tag, str) else ""
        if tag in _SKIPPED or node.get("hidden") is not None:
            return
        if tag == "label" and node.get("for") in labels:  # its text names a control instead
            return
        if tag in ("a", "button", "input", "select", "textarea") and (tag != "a" or node.get("href") is not None):
            element = _element(node, len(page.elements) + 1, tree, labels)
            if element is None:  # a hidden input: submitted with its form, never shown
                form = next((tree.getpath(a) for a in node.iterancestors("form")), "")
                if node.get("name"):
                    page.hidden.setdefault(form, []).append((node.get("name"), node.get("value", "")))
            else:
                page.elements[element.index] = element
                line.append(element.index)
                if element.form is not None:
                    page.forms.setdefault(element.form, []).append(element.index)
            return
        if tag == "form":
            page.methods[tree.getpath(node)] = ((node.get("method") or "get").upper(), node.get("action") or "")
        block = tag in _BLOCKS
        if block:
            flush()
        if tag in _HEADINGS:
            line.append(_HEADINGS[tag] + _text(node))
            flush()
            return
        add_text(node.text)
        for child in node:
            walk(child)
            add_text(child.tail)
        if block:
            flush()

    body = root.find(".//body")
    walk(body if body is not None else root)
    flush()
    return page


def _quote(text: str) -> str:
    return '"' + text.replace('"', "'") + '"'


def describe(element: Element, value: str) -> str:
    """One element as the agent sees it, with its current ``value``."""
    head = f"[{element.index}] {element.kind} {_quote(element.label)}"
    if element.kind == "select":
        chosen = next((text for v, text in element.options if v == value), value)
        options = " | ".join(text for _, text in element.options)
        return f"{head} = {_quote(chosen)} options: {options}"
    if element.kind == "checkbox":
        return head + (" (checked)" if value else "")
    if element.kind in ("input", "textarea") and value:
        shown = value if len(value) <= _TEXT_PREVIEW else value[:_TEXT_PREVIEW] + "..."
        return f"{head} = {_quote(shown)}"
    return head


def render(page: Page, values: dict[str, str], offset: int = 0, viewport: int | None = None) -> str:
    """The observation: the URL, then the lines in view (``viewport`` lines from ``offset``; all when None),
    with each control showing ``values[xpath]`` where the agent set one, else its HTML value."""
    shown = page.lines[offset:offset + viewport] if viewport is not None else page.lines[offset:]
    out = [f"URL: {page.path}"]
    if offset > 0:
        out.append(f"(scrolled: {offset} lines above)")
    for line in shown:
        out.append(" ".join(piece if isinstance(piece, str) else
                            describe(page.elements[piece], values.get(page.elements[piece].xpath,
                                                                      page.elements[piece].value))
                            for piece in line))
    if viewport is not None and offset + viewport < len(page.lines):
        out.append(f"({len(page.lines) - offset - viewport} more lines below: scroll(down))")
    return "\n".join(out)


def visible_indices(page: Page, offset: int, viewport: int | None) -> set[int]:
    shown = page.lines[offset:offset + viewport] if viewport is not None else page.lines[offset:]
    return {piece for line in shown for piece in line if isinstance(piece, int)}
