"""The shop: search, categories, products, a cart and checkout into orders."""

from __future__ import annotations

import sqlite3

from flask import Blueprint, abort, redirect, request
from werkzeug.wrappers import Response

from autotelic.envs.web.views import db, field, page, to_int
from autotelic.web.content import CATEGORIES

TEMPLATES = {
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
}

blueprint = Blueprint("shop", __name__, url_prefix="/shop")
MAX_QUANTITY = 99


def product_row(product_id: int | None) -> sqlite3.Row:
    return db().execute("SELECT * FROM products WHERE id = ?", (product_id,)).fetchone() or abort(404)


def cart_lines() -> tuple[list[sqlite3.Row], float]:
    items = db().execute("SELECT c.product_id, p.name, c.quantity, ROUND(p.price * c.quantity, 2) AS line "
                         "FROM cart_items c JOIN products p ON p.id = c.product_id ORDER BY c.rowid").fetchall()
    return items, round(sum(i["line"] for i in items), 2)


@blueprint.get("/")
def shop_index() -> tuple[str, int]:
    q = request.args.get("q", "").strip()
    products = db().execute(
        "SELECT id, name, price FROM products WHERE instr(lower(name || ' ' || category || ' ' || description), ?) "
        "ORDER BY id", (q.lower(),)).fetchall() if q else []
    return page("shop_index.html", f"Search: {q}" if q else "Shop", q=q, products=products, categories=CATEGORIES)


@blueprint.get("/category/<name>")
def category(name: str) -> tuple[str, int]:
    if name not in CATEGORIES:
        abort(404)
    products = db().execute("SELECT id, name, price FROM products WHERE category = ? ORDER BY id", (name,)).fetchall()
    return page("category.html", name.capitalize(), products=products)


@blueprint.get("/product/<int:product_id>")
def product(product_id: int) -> tuple[str, int]:
    p = product_row(product_id)
    return page("product.html", p["name"], p=p, quantity=1)


@blueprint.post("/cart/add")
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


@blueprint.post("/cart/remove")
def cart_remove() -> Response:
    with db() as connection:
        connection.execute("DELETE FROM cart_items WHERE product_id = ?", (to_int(field("product_id")),))
    return redirect("/shop/cart", 303)


@blueprint.get("/cart")
def cart() -> tuple[str, int]:
    items, total = cart_lines()
    return page("cart.html", "Cart", items=items, total=total)


@blueprint.get("/checkout")
def checkout_form() -> tuple[str, int]:
    items, total = cart_lines()
    return page("checkout.html", "Checkout", items=items, total=total, name="", address="")


@blueprint.post("/checkout")
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


@blueprint.get("/order/<int:order_id>")
def order(order_id: int) -> tuple[str, int]:
    row = db().execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone() or abort(404)
    items = db().execute("SELECT p.name, o.quantity, ROUND(p.price * o.quantity, 2) AS line FROM order_items o "
                         "JOIN products p ON p.id = o.product_id WHERE o.order_id = ? ORDER BY o.rowid",
                         (order_id,)).fetchall()
    return page("order.html", f"Order {order_id} placed", order=row, items=items,
                total=round(sum(i["line"] for i in items), 2))
