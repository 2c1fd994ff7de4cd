"""What the four sites' request handlers share: this request's database, the page layout, form fields."""

from __future__ import annotations

import sqlite3
from typing import Any

from flask import current_app, g, render_template, request

from autotelic.envs.web.store import EpisodeStore, open_database

LAYOUT_TEMPLATES = {
    "base.html": """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>{{ title }}</title></head>
<body>
{% if nav %}<nav>{% for text, href in nav %}<a href="{{ href }}">{{ text }}</a> {% endfor %}</nav>{% endif %}
<main>
<h1>{{ heading }}</h1>
{% if error %}<p role="alert">{{ error }}</p>{% endif %}
{% block main %}{% endblock %}
</main>
</body>
</html>
""",
    "macros.html": """{% macro product_list(products) %}{% if products %}<ul>
{% for p in products %}<li><a href="/shop/product/{{ p.id }}">{{ p.name }}</a> {{ p.price|money }}</li>
{% endfor %}</ul>{% else %}<p>No products match.</p>{% endif %}{% endmacro %}
{% macro field(id, label, value, kind="text") %}<p><label for="{{ id }}">{{ label }}</label>
<input type="{{ kind }}" id="{{ id }}" name="{{ id }}" value="{{ value }}"></p>{% endmacro %}
{% macro textarea(id, label, value) %}<p><label for="{{ id }}">{{ label }}</label>
<textarea id="{{ id }}" name="{{ id }}">{{ value }}</textarea></p>{% endmacro %}
{% macro select(id, label, options, chosen) %}<p><label for="{{ id }}">{{ label }}</label>
<select id="{{ id }}" name="{{ id }}">{% for value, text in options %}<option value="{{ value }}"
{%- if value|string == chosen %} selected{% endif %}>{{ text }}</option>
{% endfor %}</select></p>{% endmacro %}
""",
}

SITES = {"shop": "Shop", "forum": "Forum", "wiki": "Wiki", "booking": "Booking"}
EXTRA_NAV = {"shop": (("Cart", "/shop/cart"),)}


def db() -> sqlite3.Connection:
    """This request's connection to its episode's database (one per request: requests run on threads)."""
    if "db" not in g:
        store: EpisodeStore = current_app.config["EPISODES"]
        g.db = open_database(store.path(request.cookies.get("episode", "")) or store.default)
    return g.db


def close_db(_: BaseException | None) -> None:
    connection = g.pop("db", None)
    if connection is not None:
        connection.close()


def page(template: str, heading: str, status: int = 200, **context: Any) -> tuple[str, int]:
    """Render a site page: its title names the site, and its nav links Home and the site's root."""
    site = request.blueprint or ""
    label = SITES.get(site)
    nav = (("Home", "/"), (label, f"/{site}/"), *EXTRA_NAV.get(site, ())) if label else ()
    title = heading if label in (None, heading) else f"{heading} - {label}"
    return render_template(template, title=title, heading=heading, nav=nav, **context), status


def field(name: str) -> str:
    return request.form.get(name, "").strip()


def to_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def money(value: float) -> str:
    return f"${value:.2f}"
