"""The booking site: a table at a venue on a date and time, its confirmation and the list of bookings."""

from __future__ import annotations

from flask import Blueprint, abort, redirect
from werkzeug.wrappers import Response

from autotelic.envs.web.views import db, field, page, to_int
from autotelic.web.content import BOOKING_DATES, BOOKING_TIMES, PARTY_SIZES

TEMPLATES = {
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

blueprint = Blueprint("booking", __name__, url_prefix="/booking")
BOOKING_FIELDS = ("venue", "date", "time", "party_size", "name")
BOOKING_QUERY = ("SELECT b.id, v.name AS venue, b.date, b.time, b.party_size, b.name FROM bookings b "
                 "JOIN venues v ON v.id = b.venue_id")


def booking_page(form: dict[str, str], status: int = 200, error: str | None = None) -> tuple[str, int]:
    venues = [(v["id"], v["name"]) for v in db().execute("SELECT id, name FROM venues ORDER BY id")]
    return page("booking.html", "Booking", status, form=form, error=error, venues=venues,
                dates=[(d, d) for d in BOOKING_DATES], times=[(t, t) for t in BOOKING_TIMES],
                sizes=[(n, n) for n in PARTY_SIZES])


@blueprint.get("/")
def booking_form() -> tuple[str, int]:
    return booking_page(dict.fromkeys(BOOKING_FIELDS, ""))


@blueprint.post("/")
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


@blueprint.get("/confirmation/<int:booking_id>")
def confirmation(booking_id: int) -> tuple[str, int]:
    row = db().execute(f"{BOOKING_QUERY} WHERE b.id = ?", (booking_id,)).fetchone() or abort(404)
    return page("confirmation.html", f"Booking {booking_id} confirmed", b=row)


@blueprint.get("/bookings")
def bookings() -> tuple[str, int]:
    rows = db().execute(f"{BOOKING_QUERY} ORDER BY b.id").fetchall()
    return page("bookings.html", "My bookings", bookings=rows)
