"""The wiki: article search, articles and their edit form."""

from __future__ import annotations

import sqlite3

from flask import Blueprint, abort, redirect, request
from werkzeug.wrappers import Response

from autotelic.envs.web.views import db, field, page

TEMPLATES = {
    "wiki_index.html": """{% extends "base.html" %}{% from "macros.html" import field %}{% block main %}
<form method="get" action="/wiki/">{{ field("q", "Search the wiki", q) }}
<p><button type="submit">Search</button></p></form>
{% if articles %}<ul>
{% for a in articles %}<li><a href="/wiki/{{ a.slug }}">{{ a.title }}</a></li>
{% endfor %}</ul>{% else %}<p>No articles match.</p>{% endif %}{% endblock %}""",
    "article.html": """{% extends "base.html" %}{% block main %}<p>{{ article.body }}</p>
<p><a href="/wiki/{{ article.slug }}/edit">Edit</a></p>{% endblock %}""",
    "edit.html": """{% extends "base.html" %}{% from "macros.html" import textarea %}{% block main %}
<form method="post" action="/wiki/{{ article.slug }}/edit">{{ textarea("text", "Text", text) }}
<p><button type="submit">Save</button></p></form>{% endblock %}""",
}

blueprint = Blueprint("wiki", __name__, url_prefix="/wiki")


def article_row(slug: str) -> sqlite3.Row:
    return db().execute("SELECT * FROM articles WHERE slug = ?", (slug,)).fetchone() or abort(404)


@blueprint.get("/")
def wiki_index() -> tuple[str, int]:
    q = request.args.get("q", "").strip()
    articles = db().execute("SELECT slug, title FROM articles WHERE instr(lower(title || ' ' || body), ?) "
                            "ORDER BY rowid", (q.lower(),)).fetchall()
    return page("wiki_index.html", f"Search: {q}" if q else "Wiki", q=q, articles=articles)


@blueprint.get("/<slug>")
def article(slug: str) -> tuple[str, int]:
    row = article_row(slug)
    return page("article.html", row["title"], article=row)


@blueprint.get("/<slug>/edit")
def edit_form(slug: str) -> tuple[str, int]:
    row = article_row(slug)
    return page("edit.html", f"Edit {row['title']}", article=row, text=row["body"])


@blueprint.post("/<slug>/edit")
def edit(slug: str) -> tuple[str, int] | Response:
    row, text = article_row(slug), field("text")
    if not text:
        return page("edit.html", f"Edit {row['title']}", 400, article=row, text=text, error="Text is required.")
    with db() as connection:
        connection.execute("UPDATE articles SET body = ? WHERE slug = ?", (text, slug))
    return redirect(f"/wiki/{slug}", 303)
