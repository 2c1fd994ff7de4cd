"""Web task families, one per local site (``envs/web/sites.py``): tasks drawn from the sites' seed content,
each with a programmatic success check and progress milestones (see ``envs/web/checks.py``). The content
(``web/content.py``) and the action language (``web/actions.py``) are shared with the web environment.

Levels grow with the number of actions needed: 1 = one action on the start page, 2 = a navigation then an
action, 3 = a whole flow through a form that changes the site's state (an order, a reply, a booking).
Progress milestones carry a ``goal`` (what reaching them means, in words): the failure curriculum
(``curricula/failures.py``) turns a failed task's first unreached milestones into an easier task.
Every task also carries a scripted solution, one action a line, as its ``solution`` column (``meta["columns"]``,
where a data file's columns ride): what guided rollouts (``curricula/hints.py``) hint at or demonstrate.
A web task is done in the web environment (``generate.env=web``); ``score`` on a bare reply can only
check answer tasks, so runs score web episodes with the web rewards instead.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotelic.text import answer_matches
from autotelic.types import Task
from autotelic.web.actions import Action, ActionError, parse_action
from autotelic.web.content import ARTICLES, BOOKING_DATES, BOOKING_TIMES, POSTS, PRODUCTS, THREADS, VENUES, Product

ACTION_PREFIX = "Action:"  # every turn of the agent starts so: a small model then mostly writes an action
NAMES = ("Ada Moss", "Ben Hart", "Cleo Vance", "Dev Rao", "Eli Stone", "Fay Lin")
ADDRESSES = ("4 Elm Road", "12 Quay Street", "9 Hill Lane", "27 Park Row")
REPLIES = ("Thanks for the tip", "Good luck with it", "Count me in", "Great idea")
# Questions whose answers the wiki article states (article slug, question, answer).
WIKI_FACTS = (
    ("eldmark", "In which year was Eldmark founded?", "1802"),
    ("eldmark", "What is the capital of Eldmark?", "Brisa"),
    ("brisa", "How many people live in Brisa?", "240000"),
    ("brisa", "Who designed the city hall of Brisa?", "Tomas Veil"),
    ("lake-varden", "How deep is Lake Varden in metres?", "42"),
    ("lake-varden", "Who built the first bridge over Lake Varden?", "Ada Korr"),
    ("mount-tarn", "How high is Mount Tarn in metres?", "2810"),
    ("mount-tarn", "In which year was Mount Tarn first climbed?", "1889"),
    ("glimmerfruit", "What colour is a glimmerfruit?", "orange"),
    ("glimmerfruit", "Who first described the glimmerfruit?", "Lena Holt"),
    ("skyrail", "How many cabins does the Skyrail have?", "24"),
    ("skyrail", "In which year did the Skyrail open?", "1998"),
    ("copper-owl", "Who made the Copper Owl?", "Mara Fenn"),
    ("copper-owl", "How tall is the Copper Owl in metres?", "4"),
    ("varden-festival", "How many boat races does the Varden Festival have?", "12"),
    ("varden-festival", "In which month is the Varden Festival held?", "July"),
    ("port-lune", "What colour is the lighthouse of Port Lune?", "green"),
    ("port-lune", "How many people live in Port Lune?", "9000"),
    ("tarnby", "In which year did the school of Tarnby open?", "1921"),
    ("tarnby", "How many pupils did the school of Tarnby open with?", "35"),
    ("river-sella", "How long is the River Sella in km?", "118"),
    ("river-sella", "In which month does the water of the River Sella turn brown?", "April"),
    ("royal-library", "How many books does the Royal Library hold?", "80000"),
    ("royal-library", "Who was the first librarian of the Royal Library?", "Irma Dahl"),
    ("flag-of-eldmark", "What colour is the flag of Eldmark?", "purple"),
    ("flag-of-eldmark", "How many points does the star on the flag of Eldmark have?", "7"),
    ("snow-hare", "In which month does the fur of the snow hare turn white?", "November"),
    ("snow-hare", "How much does an adult snow hare weigh in kg?", "3"),
    ("coast-railway", "How many stations does the Coast Railway have?", "11"),
    ("coast-railway", "In which year did the Coast Railway open?", "1905"),
    ("harvest-day", "In which month is Harvest Day?", "October"),
    ("harvest-day", "In which year did Harvest Day become a holiday?", "1931"),
)
_ARTICLE_TITLES = {a.slug: a.title for a in ARTICLES}


def _price(product: Product) -> str:
    return f"{product.price:.2f}"


def _task(family: str, level: int, prompt: str, start: str, success: list[dict[str, Any]], solution: list[str],
          progress: list[dict[str, Any]] | None = None, answer: str = "") -> Task:
    meta = {"start": start, "success": success, "progress": progress or [],
            "columns": {"solution": "\n".join(solution)}}
    return Task(prompt=prompt, answer=answer, family=family, level=level, uid=f"{family}:{prompt}", meta=meta,
                response_prefix=ACTION_PREFIX)


def _answer_task(family: str, level: int, prompt: str, start: str, answer: str, path: list[str],
                 progress: list[dict[str, Any]] | None = None) -> Task:
    """A question whose answer shows on the page ``path`` (actions, from ``start``) leads to."""
    return _task(family, level, f"{prompt} Answer with answer(\"...\").", start, [{"answer": answer}],
                 [*path, str(Action("answer", text=answer))], progress, answer)


def _click(label: str) -> str:
    return str(Action("click", label=label))


def _type(label: str, text: str) -> str:
    return str(Action("type", label=label, text=text))


def _select(label: str, option: str) -> str:
    return str(Action("select", label=label, text=option))


def _shop(rng: random.Random, level: int) -> Task:
    product = rng.choice(PRODUCTS)
    category, page = f"/shop/category/{product.category}", f"/shop/product/{product.id}"
    opened = {"url": page, "goal": f"open the page of the {product.name}"}
    in_cart = {"sql": "SELECT quantity FROM cart_items WHERE product_id = ?", "params": [product.id],
               "goal": f"add the {product.name} to the cart"}
    if level == 1:
        if rng.random() < 0.5:
            return _answer_task("web_shop", 1, f"What is the price of the {product.name}?", category,
                                _price(product), [_click(product.name)])
        return _task("web_shop", 1, f"Open the page of the {product.name}.", category, [{"url": page}],
                     [_click(product.name)])
    if level == 2:
        if rng.random() < 0.5:
            return _answer_task("web_shop", 2, f"How many {product.name} items are in stock?", category,
                                str(product.stock), [_click(product.name)], [opened])
        return _task("web_shop", 2, f"Add the {product.name} to the cart.", category, [in_cart],
                     [_click(product.name), _click("Add to cart")], [opened])
    quantity, name, address = rng.choice((1, 2, 3)), rng.choice(NAMES), rng.choice(ADDRESSES)
    ordered = {"sql": "SELECT COUNT(*) FROM orders o JOIN order_items i ON i.order_id = o.id "
                      "WHERE i.product_id = ? AND i.quantity = ? AND o.name = ? AND o.address = ?",
               "params": [product.id, quantity, name, address]}
    return _task("web_shop", 3, f"Order {quantity} x {product.name} for {name}, {address}.", "/shop/", [ordered],
                 [_click(product.category.capitalize()), _click(product.name), _type("Quantity", str(quantity)),
                  _click("Add to cart"), _click("Checkout"), _type("Name", name), _type("Address", address),
                  _click("Place order")],
                 [opened, in_cart, {"url": "/shop/checkout", "goal": "go to the checkout"},
                  {"field": "Name", "value": name, "goal": f"type {name} as the name"},
                  {"field": "Address", "value": address, "goal": f"type {address} as the address"}])


def _forum(rng: random.Random, level: int) -> Task:
    thread = rng.choice(THREADS)
    page = f"/forum/thread/{thread.id}"
    opened = {"url": page, "goal": f"open the thread '{thread.title}'"}
    if level == 1:
        if rng.random() < 0.5:
            return _answer_task("web_forum", 1, f"Who started the thread '{thread.title}'?", "/forum/",
                                thread.author, [_click(thread.title)])
        return _task("web_forum", 1, f"Open the thread '{thread.title}'.", "/forum/", [{"url": page}],
                     [_click(thread.title)])
    if level == 2:
        first = next(p for p in POSTS if p.thread_id == thread.id)
        return _answer_task("web_forum", 2, f"Who wrote the first reply in the thread '{thread.title}'?",
                            "/forum/", first.author, [_click(thread.title)], [opened])
    name, reply = rng.choice(NAMES), rng.choice(REPLIES)
    posted = {"sql": "SELECT COUNT(*) FROM posts WHERE thread_id = ? AND author = ? AND body = ?",
              "params": [thread.id, name, reply]}
    return _task("web_forum", 3, f"Reply '{reply}' to the thread '{thread.title}' as {name}.", "/forum/",
                 [posted], [_click(thread.title), _type("Your name", name), _type("Reply", reply),
                            _click("Post reply")],
                 [opened, {"field": "Your name", "value": name, "goal": f"type {name} as your name"},
                            {"field": "Reply", "value": reply, "goal": f"type '{reply}' as the reply"}])


def _wiki(rng: random.Random, level: int) -> Task:
    slug, question, answer = rng.choice(WIKI_FACTS)
    page = f"/wiki/{slug}"
    opened = {"url": page, "goal": f"open the wiki article '{_ARTICLE_TITLES[slug]}'"}
    if level == 1:
        return _answer_task("web_wiki", 1, question, page, answer, [])
    if level == 2:
        return _answer_task("web_wiki", 2, question, "/wiki/", answer, [_click(_ARTICLE_TITLES[slug])], [opened])
    text = f"{_ARTICLE_TITLES[slug]} is closed for repairs."
    edited = {"sql": "SELECT COUNT(*) FROM articles WHERE slug = ? AND body = ?", "params": [slug, text]}
    return _task("web_wiki", 3, f"Replace the text of the wiki article '{_ARTICLE_TITLES[slug]}' with '{text}'",
                 "/wiki/", [edited],
                 [_click(_ARTICLE_TITLES[slug]), _click("Edit"), _type("Text", text), _click("Save")], [opened, {"url": f"{page}/edit", "goal": "open its edit page"},
                                      {"field": "Text", "value": text, "goal": f"type '{text}' as its text"}])


def _booking(rng: random.Random, level: int) -> Task:
    venue, date, time = rng.choice(VENUES), rng.choice(BOOKING_DATES), rng.choice(BOOKING_TIMES)
    if level < 3:  # not the form's defaults (its first options), which would hold before any action
        venue, date, time = rng.choice(VENUES[1:]), rng.choice(BOOKING_DATES[1:]), rng.choice(BOOKING_TIMES[1:])
    if level == 1:  # one select, drawn after the three values so that levels 2 and 3 draw as before
        label, value = rng.choice((("Venue", venue.name), ("Date", date), ("Time", time)))
        return _task("web_booking", 1, f"In the booking form, choose the {label.lower()} {value}.", "/booking/",
                     [{"field": label, "value": value}], [_select(label, value)])
    if level == 2:
        return _task("web_booking", 2, f"In the booking form, choose {venue.name} on {date}.", "/booking/",
                     [{"field": "Venue", "value": venue.name}, {"field": "Date", "value": date}],
                     [_select("Venue", venue.name), _select("Date", date)])
    size, name = rng.choice((2, 3, 4)), rng.choice(NAMES)
    booked = {"sql": "SELECT COUNT(*) FROM bookings WHERE venue_id = ? AND date = ? AND time = ? "
                     "AND party_size = ? AND name = ?", "params": [venue.id, date, time, size, name]}
    fields = [{"field": "Venue", "value": venue.name, "goal": f"choose {venue.name} as the venue"},
              {"field": "Date", "value": date, "goal": f"choose the date {date}"},
              {"field": "Time", "value": time, "goal": f"choose the time {time}"},
              {"field": "Party size", "value": str(size), "goal": f"choose a party size of {size}"},
              {"field": "Name", "value": name, "goal": f"type {name} as the name"}]
    return _task("web_booking", 3, f"Book {venue.name} on {date} at {time} for {size} people, name {name}.",
                 "/booking/", [booked], [*(_select(f["field"], f["value"]) for f in fields[:4]), _type("Name", name),
                                        _click("Book")], fields)


@dataclass(frozen=True)
class WebFamily:
    name: str
    make: Callable[[random.Random, int], Task]
    levels: tuple[int, ...] = (1, 2, 3)

    def generate(self, rng: random.Random, level: int) -> Task:
        return self.make(rng, level)

    def score(self, task: Task, completion: str) -> float:
        """Answer tasks only (a bare reply cannot change the site); episodes are scored by the web rewards."""
        expected = [c["answer"] for c in task.meta.get("success", []) if "answer" in c]
        if not expected:
            return 0.0
        try:
            action = parse_action(completion)
        except ActionError:
            return 0.0
        return float(action.kind == "answer" and answer_matches(action.text, expected[0]))


WEB_FAMILIES = {f.name: f for f in (WebFamily("web_shop", _shop), WebFamily("web_forum", _forum),
                                    WebFamily("web_wiki", _wiki), WebFamily("web_booking", _booking))}
