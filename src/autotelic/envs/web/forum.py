"""The forum: threads, their replies, and new threads."""

from __future__ import annotations

import sqlite3

from flask import Blueprint, abort, redirect
from werkzeug.wrappers import Response

from autotelic.envs.web.views import db, field, page

TEMPLATES = {
    "forum_index.html": """{% extends "base.html" %}{% block main %}<p><a href="/forum/new">New thread</a></p><ul>
{% for t in threads %}<li><a href="/forum/thread/{{ t.id }}">{{ t.title }}</a> by {{ t.author }},
{{ t.replies }} {{ "reply" if t.replies == 1 else "replies" }}</li>
{% endfor %}</ul>{% endblock %}""",
    "thread.html": """{% extends "base.html" %}{% from "macros.html" import field, textarea %}{% block main %}
<p>{{ thread.author }}: {{ thread.body }}</p>
<h2>Replies</h2>{% if posts %}<ul>
{% for p in posts %}<li>{{ p.author }}: {{ p.body }}</li>
{% endfor %}</ul>{% else %}<p>No replies yet.</p>{% endif %}
<form method="post" action="/forum/thread/{{ thread.id }}">{{ field("author", "Your name", author) }}
{{ textarea("body", "Reply", body) }}
<p><button type="submit">Post reply</button></p></form>{% endblock %}""",
    "new_thread.html": """{% extends "base.html" %}{% from "macros.html" import field, textarea %}{% block main %}
<form method="post" action="/forum/new">{{ field("title", "Title", title_text) }}
{{ field("author", "Your name", author) }}
{{ textarea("body", "Message", body) }}
<p><button type="submit">Create thread</button></p></form>{% endblock %}""",
}

blueprint = Blueprint("forum", __name__, url_prefix="/forum")


@blueprint.get("/")
def forum_index() -> tuple[str, int]:
    threads = db().execute("SELECT t.id, t.title, t.author, COUNT(p.id) AS replies FROM threads t "
                           "LEFT JOIN posts p ON p.thread_id = t.id GROUP BY t.id ORDER BY t.id").fetchall()
    return page("forum_index.html", "Forum", threads=threads)


def thread_row(thread_id: int) -> sqlite3.Row:
    return db().execute("SELECT * FROM threads WHERE id = ?", (thread_id,)).fetchone() or abort(404)


def thread_page(thread_id: int, status: int = 200, error: str | None = None, author: str = "",
                body: str = "") -> tuple[str, int]:
    thread = thread_row(thread_id)
    posts = db().execute("SELECT author, body FROM posts WHERE thread_id = ? ORDER BY id", (thread_id,)).fetchall()
    return page("thread.html", thread["title"], status, thread=thread, posts=posts, error=error, author=author,
                body=body)


@blueprint.get("/thread/<int:thread_id>")
def thread(thread_id: int) -> tuple[str, int]:
    return thread_page(thread_id)


@blueprint.post("/thread/<int:thread_id>")
def reply(thread_id: int) -> tuple[str, int] | Response:
    thread_row(thread_id)
    author, body = field("author"), field("body")
    if not (author and body):
        return thread_page(thread_id, 400, "Name and reply are required.", author, body)
    with db() as connection:
        connection.execute("INSERT INTO posts (thread_id, author, body) VALUES (?, ?, ?)", (thread_id, author, body))
    return redirect(f"/forum/thread/{thread_id}", 303)


@blueprint.get("/new")
def new_thread_form() -> tuple[str, int]:
    return page("new_thread.html", "New thread", title_text="", author="", body="")


@blueprint.post("/new")
def new_thread() -> tuple[str, int] | Response:
    title, author, body = field("title"), field("author"), field("body")
    if not (title and author and body):
        return page("new_thread.html", "New thread", 400, title_text=title, author=author, body=body,
                    error="Title, name and message are required.")
    with db() as connection:
        thread_id = connection.execute("INSERT INTO threads (title, author, body) VALUES (?, ?, ?)",
                                       (title, author, body)).lastrowid
    return redirect(f"/forum/thread/{thread_id}", 303)
