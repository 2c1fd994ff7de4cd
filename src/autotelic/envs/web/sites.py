"""Four small web sites (shop, forum, wiki, booking) in one Flask app, served on localhost by ``WebServer``.

Pages are plain server-rendered HTML without scripts or styles, and short, because a small model reads
them. Each episode (the ``episode`` cookie) has its own SQLite file copied from a seeded template, so
parallel episodes never see each other's orders, posts or bookings; a request without a known episode
uses the shared default database, so a bare browser works too.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
import threading
import uuid
from collections import OrderedDict
from dataclasses import astuple
from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, abort, current_app, g, redirect, render_template, request
from jinja2 import DictLoader
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Response

from autotelic.envs.web.content import (
    ARTICLES,
    BOOKING_DATES,
    BOOKING_TIMES,
    CATEGORIES,
    PARTY_SIZES,
    POSTS,
    PRODUCTS,
    THREADS,
    VENUES,
)

DEFAULT_EPISODE = "default"

SCHEMA = """
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL,
                       stock INTEGER NOT NULL, description TEXT NOT NULL);
CREATE TABLE cart_items (product_id INTEGER PRIMARY KEY REFERENCES products(id), quantity INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, name TEXT NOT NULL, address TEXT NOT NULL);
CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id),
                          product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL);
CREATE TABLE threads (id INTEGER PRIMARY KEY, title TEXT NOT NULL, author TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE posts (id INTEGER PRIMARY KEY, thread_id INTEGER NOT NULL REFERENCES threads(id),
                    author TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE articles (slug TEXT PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE venues (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE bookings (id INTEGER PRIMARY KEY, venue_id INTEGER NOT NULL REFERENCES venues(id), date TEXT NOT NULL,
                       time TEXT NOT NULL, party_size INTEGER NOT NULL, name TEXT NOT NULL);
"""


def seed_database(path: Path) -> None:
    """Write a fresh database with the schema and the seed content of ``content``."""
    path.unlink(missing_ok=True)
    connection = sqlite3.connect(path)
    try:
        with connection:
            connection.executescript(SCHEMA)
            for table, rows in (("products", PRODUCTS), ("threads", THREADS), ("posts", POSTS),
                                ("articles", ARTICLES), ("venues", VENUES)):
                values = [astuple(row) for row in rows]
                connection.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(values[0]))})", values)
    finally:
        connection.close()


def _open(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, timeout=10)
    connection.row_factory = sqlite3.Row
    return connection


class EpisodeStore:
    """Episode databases: copies of one seeded template, the oldest deleted beyond ``max_episodes``."""

    def __init__(self, root: Path, max_episodes: int) -> None:
        if max_episodes < 1:
            raise ValueError(f"max_episodes must be at least 1, got {max_episodes}")
        self.max_episodes = max_episodes
        self.template, self.default, self.dir = root / "template.sqlite", root / "default.sqlite", root / "episodes"
        seed_database(self.template)
        shutil.copyfile(self.template, self.default)
        shutil.rmtree(self.dir, ignore_errors=True)  # files of an earlier run are unknown episodes: unreachable
        self.dir.mkdir(parents=True)
        self._episodes: OrderedDict[str, Path] = OrderedDict()
        self._lock = threading.Lock()

    def new(self) -> str:
        episode = uuid.uuid4().hex
        path = self.dir / f"{episode}.sqlite"
        shutil.copyfile(self.template, path)
        with self._lock:
            self._episodes[episode] = path
            while len(self._episodes) > self.max_episodes:
                _, old = self._episodes.popitem(last=False)
                old.unlink(missing_ok=True)  # an open connection keeps reading the unlinked file
        return episode

    def path(self, episode: str) -> Path | None:
        if episode == DEFAULT_EPISODE:
            return self.default
        with self._lock:
            return self._episodes.get(episode)


# ---- pages ---------------------------------------------------------------------------------------

TEMPLATES = {
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
    "home.html": """{% extends "base.html" %}{% block main %}<ul>
{% for text, href in sites %}<li><a href="{{ href }}">{{ text }}</a></li>
{% endfor %}</ul>{% endblock %}""",
    "error.html": """{% extends "base.html" %}{% block main %}<p><a href="/">Home</a></p>{% endblock %}""",
    "shop_index.html": """{% extends "base.html" %}{% from "macros.html" import field, product_list %}
{% block main %}<form method="get" action="/shop/">{{ field("q", "Search products", q) }}
<p><button type="submit">Search</button></p></form>
{% if q %}{{ product_list(products) }}{% endif %}
<h2>Categories</h2><ul>
{% for c in categories %}<li><a href="/shop/category/{{ c }}">{{ c|capitalize }}</a></li>
{% endfor %}</ul>{% endblock %}""",
    "category.html": """{% extends "base.html" %}{% from "macros.html" import product_list %}
{% block main %}{{ product_list(products) }}{% endblock %}""",
    "product.html": """{% extends "base.html" %}{% from "macros.html" import field %}{% block main %}
<p>Price: {{ p.price|money }}</p>
<p>{{ p.description }}</p>
<p>In stock: {{ p.stock }}</p>
<form method="post" action="/shop/cart/add"><input type="hidden" name="product_id" value="{{ p.id }}">
{{ field("quantity", "Quantity", quantity, "number") }}
<p><button type="submit">Add to cart</button></p></form>{% endblock %}""",
    "cart.html": """{% extends "base.html" %}{% block main %}{% if items %}<ul>
{% for i in items %}<li><a href="/shop/product/{{ i.product_id }}">{{ i.name }}</a>, quantity {{ i.quantity }}:
{{ i.line|money }} <form method="post" action="/shop/cart/remove">
<input type="hidden" name="product_id" value="{{ i.product_id }}"><button type="submit">Remove</button></form></li>
{% endfor %}</ul>
<p>Total: {{ total|money }}</p>
<p><a href="/shop/checkout">Checkout</a></p>{% else %}<p>Your cart is empty.</p>{% endif %}{% endblock %}""",
    "checkout.html": """{% extends "base.html" %}{% from "macros.html" import field %}{% block main %}
{% if items %}<p>Total: {{ total|money }}</p>
<form method="post" action="/shop/checkout">{{ field("name", "Name", name) }}{{ field("address", "Address", address) }}
<p><button type="submit">Place order</button></p></form>{% else %}<p>Your cart is empty.</p>{% endif %}
{% endblock %}""",
    "order.html": """{% extends "base.html" %}{% block main %}<p>For {{ order.name }}, {{ order.address }}.</p><ul>
{% for i in items %}<li>{{ i.name }}, quantity {{ i.quantity }}: {{ i.line|money }}</li>
{% endfor %}</ul>
<p>Total: {{ total|money }}</p>{% endblock %}""",
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
    "booking.html": """{% extends "base.html" %}{% from "macros.html" import field, select %}{% block main %}
<form method="post" action="/booking/">{{ select("venue", "Venue", venues, form.venue) }}
{{ select("date", "Date", dates, form.date) }}{{ select("time", "Time", times, form.time) }}
{{ select("party_size", "Party size", sizes, form.party_size) }}{{ field("name", "Name", form.name) }}
<p><button type="submit">Book</button></p></form>
<p><a href="/booking/bookings">My bookings</a></p>{% endblock %}""",
    "confirmation.html": """{% extends "base.html" %}{% block main %}<p>Booking {{ b.id }} confirmed: {{ b.venue }},
{{ b.date }} {{ b.time }}, party of {{ b.party_size }}, name {{ b.name }}</p>
<p><a href="/booking/bookings">My bookings</a></p>{% endblock %}""",
    "bookings.html": """{% extends "base.html" %}{% block main %}{% if bookings %}<ul>
{% for b in bookings %}<li>Booking {{ b.id }}: {{ b.venue }}, {{ b.date }} {{ b.time }}, party of {{ b.party_size }},
name {{ b.name }}</li>
{% endfor %}</ul>{% else %}<p>No bookings yet.</p>{% endif %}{% endblock %}""",
}

SITES = {"shop": "Shop", "forum": "Forum", "wiki": "Wiki", "booking": "Booking"}
EXTRA_NAV = {"shop": (("Cart", "/shop/cart"),)}
ERROR_HEADINGS = {404: "Page not found", 405: "Method not allowed"}


def db() -> sqlite3.Connection:
    """This request's connection to its episode's database (one per request: requests run on threads)."""
    if "db" not in g:
        store: EpisodeStore = current_app.config["EPISODES"]
        g.db = _open(store.path(request.cookies.get("episode", "")) or store.default)
    return g.db


def _close_db(_: BaseException | None) -> None:
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


# ---- shop ----------------------------------------------------------------------------------------

shop = Blueprint("shop", __name__, url_prefix="/shop")
MAX_QUANTITY = 99


def product_row(product_id: int | None) -> sqlite3.Row:
    return db().execute("SELECT * FROM products WHERE id = ?", (product_id,)).fetchone() or abort(404)


def cart_lines() -> tuple[list[sqlite3.Row], float]:
    items = db().execute("SELECT c.product_id, p.name, c.quantity, ROUND(p.price * c.quantity, 2) AS line "
                         "FROM cart_items c JOIN products p ON p.id = c.product_id ORDER BY c.rowid").fetchall()
    return items, round(sum(i["line"] for i in items), 2)


@shop.get("/")
def shop_index() -> tuple[str, int]:
    q = request.args.get("q", "").strip()
    products = db().execute(
        "SELECT id, name, price FROM products WHERE instr(lower(name || ' ' || category || ' ' || description), ?) "
        "ORDER BY id", (q.lower(),)).fetchall() if q else []
    return page("shop_index.html", f"Search: {q}" if q else "Shop", q=q, products=products, categories=CATEGORIES)


@shop.get("/category/<name>")
def category(name: str) -> tuple[str, int]:
    if name not in CATEGORIES:
        abort(404)
    products = db().execute("SELECT id, name, price FROM products WHERE category = ? ORDER BY id", (name,)).fetchall()
    return page("category.html", name.capitalize(), products=products)


@shop.get("/product/<int:product_id>")
def product(product_id: int) -> tuple[str, int]:
    p = product_row(product_id)
    return page("product.html", p["name"], p=p, quantity=1)


@shop.post("/cart/add")
def cart_add() -> tuple[str, int] | Response:
    p = product_row(to_int(field("product_id")))
    quantity = to_int(field("quantity"))
    if quantity is None or not 1 <= quantity <= MAX_QUANTITY:
        return page("product.html", p["name"], 400, p=p, quantity=field("quantity"),
                    error=f"Quantity must be a whole number from 1 to {MAX_QUANTITY}.")
    with db() as connection:  # adding a product already in the cart adds to its quantity
        connection.execute("INSERT INTO cart_items (product_id, quantity) VALUES (?, ?) ON CONFLICT(product_id) "
                           "DO UPDATE SET quantity = quantity + excluded.quantity", (p["id"], quantity))
    return redirect("/shop/cart", 303)


@shop.post("/cart/remove")
def cart_remove() -> Response:
    with db() as connection:
        connection.execute("DELETE FROM cart_items WHERE product_id = ?", (to_int(field("product_id")),))
    return redirect("/shop/cart", 303)


@shop.get("/cart")
def cart() -> tuple[str, int]:
    items, total = cart_lines()
    return page("cart.html", "Cart", items=items, total=total)


@shop.get("/checkout")
def checkout_form() -> tuple[str, int]:
    items, total = cart_lines()
    return page("checkout.html", "Checkout", items=items, total=total, name="", address="")


@shop.post("/checkout")
def checkout() -> tuple[str, int] | Response:
    items, total = cart_lines()
    name, address = field("name"), field("address")
    if not (items and name and address):
        error = "Name and address are required." if items else None
        return page("checkout.html", "Checkout", 400, items=items, total=total, name=name, address=address,
                    error=error)
    with db() as connection:
        order_id = connection.execute("INSERT INTO orders (name, address) VALUES (?, ?)", (name, address)).lastrowid
        connection.execute("INSERT INTO order_items (order_id, product_id, quantity) "
                           "SELECT ?, product_id, quantity FROM cart_items ORDER BY rowid", (order_id,))
        connection.execute("DELETE FROM cart_items")
    return redirect(f"/shop/order/{order_id}", 303)


@shop.get("/order/<int:order_id>")
def order(order_id: int) -> tuple[str, int]:
    row = db().execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone() or abort(404)
    items = db().execute("SELECT p.name, o.quantity, ROUND(p.price * o.quantity, 2) AS line FROM order_items o "
                         "JOIN products p ON p.id = o.product_id WHERE o.order_id = ? ORDER BY o.rowid",
                         (order_id,)).fetchall()
    return page("order.html", f"Order {order_id} placed", order=row, items=items,
                total=round(sum(i["line"] for i in items), 2))


# ---- forum ---------------------------------------------------------------------------------------

forum = Blueprint("forum", __name__, url_prefix="/forum")


@forum.get("/")
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


@forum.get("/thread/<int:thread_id>")
def thread(thread_id: int) -> tuple[str, int]:
    return thread_page(thread_id)


@forum.post("/thread/<int:thread_id>")
def reply(thread_id: int) -> tuple[str, int] | Response:
    thread_row(thread_id)
    author, body = field("author"), field("body")
    if not (author and body):
        return thread_page(thread_id, 400, "Name and reply are required.", author, body)
    with db() as connection:
        connection.execute("INSERT INTO posts (thread_id, author, body) VALUES (?, ?, ?)", (thread_id, author, body))
    return redirect(f"/forum/thread/{thread_id}", 303)


@forum.get("/new")
def new_thread_form() -> tuple[str, int]:
    return page("new_thread.html", "New thread", title_text="", author="", body="")


@forum.post("/new")
def new_thread() -> tuple[str, int] | Response:
    title, author, body = field("title"), field("author"), field("body")
    if not (title and author and body):
        return page("new_thread.html", "New thread", 400, title_text=title, author=author, body=body,
                    error="Title, name and message are required.")
    with db() as connection:
        thread_id = connection.execute("INSERT INTO threads (title, author, body) VALUES (?, ?, ?)",
                                       (title, author, body)).lastrowid
    return redirect(f"/forum/thread/{thread_id}", 303)


# ---- wiki ----------------------------------------------------------------------------------------

wiki = Blueprint("wiki", __name__, url_prefix="/wiki")


def article_row(slug: str) -> sqlite3.Row:
    return db().execute("SELECT * FROM articles WHERE slug = ?", (slug,)).fetchone() or abort(404)


@wiki.get("/")
def wiki_index() -> tuple[str, int]:
    q = request.args.get("q", "").strip()
    articles = db().execute("SELECT slug, title FROM articles WHERE instr(lower(title || ' ' || body), ?) "
                            "ORDER BY rowid", (q.lower(),)).fetchall()
    return page("wiki_index.html", f"Search: {q}" if q else "Wiki", q=q, articles=articles)


@wiki.get("/<slug>")
def article(slug: str) -> tuple[str, int]:
    row = article_row(slug)
    return page("article.html", row["title"], article=row)


@wiki.get("/<slug>/edit")
def edit_form(slug: str) -> tuple[str, int]:
    row = article_row(slug)
    return page("edit.html", f"Edit {row['title']}", article=row, text=row["body"])


@wiki.post("/<slug>/edit")
def edit(slug: str) -> tuple[str, int] | Response:
    row, text = article_row(slug), field("text")
    if not text:
        return page("edit.html", f"Edit {row['title']}", 400, article=row, text=text, error="Text is required.")
    with db() as connection:
        connection.execute("UPDATE articles SET body = ? WHERE slug = ?", (text, slug))
    return redirect(f"/wiki/{slug}", 303)


# ---- booking -------------------------------------------------------------------------------------

booking = Blueprint("booking", __name__, url_prefix="/booking")
BOOKING_FIELDS = ("venue", "date", "time", "party_size", "name")
BOOKING_QUERY = ("SELECT b.id, v.name AS venue, b.date, b.time, b.party_size, b.name FROM bookings b "
                 "JOIN venues v ON v.id = b.venue_id")


def booking_page(form: dict[str, str], status: int = 200, error: str | None = None) -> tuple[str, int]:
    venues = [(v["id"], v["name"]) for v in db().execute("SELECT id, name FROM venues ORDER BY id")]
    return page("booking.html", "Booking", status, form=form, error=error, venues=venues,
                dates=[(d, d) for d in BOOKING_DATES], times=[(t, t) for t in BOOKING_TIMES],
                sizes=[(n, n) for n in PARTY_SIZES])


@booking.get("/")
def booking_form() -> tuple[str, int]:
    return booking_page(dict.fromkeys(BOOKING_FIELDS, ""))


@booking.post("/")
def book() -> tuple[str, int] | Response:
    form = {name: field(name) for name in BOOKING_FIELDS}
    venue_id, size = to_int(form["venue"]), to_int(form["party_size"])
    venue = db().execute("SELECT id FROM venues WHERE id = ?", (venue_id,)).fetchone()
    if venue is None or form["date"] not in BOOKING_DATES or form["time"] not in BOOKING_TIMES \
            or size not in PARTY_SIZES:
        return booking_page(form, 400, "Choose a venue, date, time and party size from the lists.")
    if not form["name"]:
        return booking_page(form, 400, "Name is required.")
    with db() as connection:
        booking_id = connection.execute(
            "INSERT INTO bookings (venue_id, date, time, party_size, name) VALUES (?, ?, ?, ?, ?)",
            (venue_id, form["date"], form["time"], size, form["name"])).lastrowid
    return redirect(f"/booking/confirmation/{booking_id}", 303)


@booking.get("/confirmation/<int:booking_id>")
def confirmation(booking_id: int) -> tuple[str, int]:
    row = db().execute(f"{BOOKING_QUERY} WHERE b.id = ?", (booking_id,)).fetchone() or abort(404)
    return page("confirmation.html", f"Booking {booking_id} confirmed", b=row)


@booking.get("/bookings")
def bookings() -> tuple[str, int]:
    rows = db().execute(f"{BOOKING_QUERY} ORDER BY b.id").fetchall()
    return page("bookings.html", "My bookings", bookings=rows)


# ---- app and server ------------------------------------------------------------------------------


def home() -> tuple[str, int]:
    return page("home.html", "Home", sites=[(label, f"/{site}/") for site, label in SITES.items()])


def error_page(error: HTTPException) -> tuple[str, int]:
    heading = ERROR_HEADINGS.get(error.code or 500, error.name)
    return render_template("error.html", title=heading, heading=heading, nav=()), error.code or 500


def create_app(episodes: EpisodeStore) -> Flask:
    app = Flask(__name__)
    app.config["EPISODES"] = episodes
    app.jinja_loader = DictLoader(TEMPLATES)  # names end in .html, so Flask autoescapes them
    app.add_template_filter(money)
    app.teardown_appcontext(_close_db)
    app.register_error_handler(HTTPException, error_page)
    app.add_url_rule("/", view_func=home)
    for blueprint in (shop, forum, wiki, booking):
        app.register_blueprint(blueprint)
    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log line per request (an episode makes dozens); errors are still logged."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


class WebServer:
    """The sites on ``127.0.0.1`` at a free port, in a daemon thread, with per-episode databases."""

    url: str

    def __init__(self, data_dir: str | Path | None = None, max_episodes: int = 512) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="autotelic-web-") if data_dir is None else data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.episodes = EpisodeStore(self.data_dir, max_episodes)
        self.app = create_app(self.episodes)
        self.url = ""
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> WebServer:
        if self._server is None:
            self._server = make_server("127.0.0.1", 0, self.app, threaded=True, request_handler=_QuietHandler)
            self.url = f"http://127.0.0.1:{self._server.server_port}"
            self._thread = threading.Thread(target=self._server.serve_forever, name="autotelic-web", daemon=True)
            self._thread.start()
        return self

    def new_episode(self) -> str:
        return self.episodes.new()

    def connect(self, episode: str) -> sqlite3.Connection:
        path = self.episodes.path(episode)
        if path is None:
            raise KeyError(f"unknown episode {episode!r} (never made, or pruned beyond max_episodes)")
        return _open(path)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join()
            self._server = self._thread = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> WebServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: WebServer | None = None
_shared_lock = threading.Lock()


def shared_server() -> WebServer:
    """One server for the whole process, started on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WebServer().start()
            atexit.register(_shared.close)
        return _shared
