"""The local web sites over real HTTP: pages, forms end to end, per-episode isolation, and page size."""

from contextlib import closing
from urllib.parse import urljoin, urlsplit

import httpx
import lxml.html
import pytest

from autotelic.envs.web.sites import WebServer, shared_server
from autotelic.tasks.web import WIKI_FACTS
from autotelic.web.content import ARTICLES, CATEGORIES, POSTS, PRODUCTS, THREADS, VENUES

MAX_WORDS = 150


@pytest.fixture(scope="module")
def server():
    with WebServer() as server:
        yield server


@pytest.fixture
def episode(server) -> str:
    return server.new_episode()


@pytest.fixture
def client(server, episode):
    with httpx.Client(base_url=server.url, follow_redirects=True, cookies={"episode": episode}) as client:
        yield client


def parse(response: httpx.Response) -> lxml.html.HtmlElement:
    return lxml.html.fromstring(response.text)


def check_page(response: httpx.Response) -> lxml.html.HtmlElement:
    """The page rules the agent's observation relies on: title, main with one h1, labelled controls, short text."""
    tree = parse(response)
    assert tree.findtext(".//title").strip()
    assert len(tree.findall(".//main")) == 1 and len(tree.findall(".//main//h1")) == 1
    assert not tree.findall(".//script") and not tree.findall(".//style")
    labels = {label.get("for") for label in tree.iter("label")}
    controls = [c for c in tree.iter("input", "select", "textarea") if c.get("type") != "hidden"]
    ids = [c.get("id") for c in controls]
    assert len(ids) == len(set(ids)) and set(ids) <= labels, f"unlabelled control on {response.url}"
    assert all(b.get("type") == "submit" and b.text_content().strip() for b in tree.iter("button"))
    assert len(tree.find("body").text_content().split()) < MAX_WORDS, f"{response.url} is too long"
    return tree


def heading(response: httpx.Response) -> str:
    return parse(response).findtext(".//h1")


def text(response: httpx.Response) -> str:
    return " ".join(parse(response).find("body").text_content().split())


@pytest.mark.parametrize("path, title, h1", [
    ("/", "Home", "Home"),
    ("/shop/", "Shop", "Shop"),
    ("/shop/category/garden", "Garden - Shop", "Garden"),
    ("/shop/product/2", "Steel Kettle - Shop", "Steel Kettle"),
    ("/shop/cart", "Cart - Shop", "Cart"),
    ("/forum/", "Forum", "Forum"),
    ("/forum/thread/1", "Best soil for tomatoes - Forum", "Best soil for tomatoes"),
    ("/forum/new", "New thread - Forum", "New thread"),
    ("/wiki/", "Wiki", "Wiki"),
    ("/wiki/skyrail", "Skyrail - Wiki", "Skyrail"),
    ("/wiki/skyrail/edit", "Edit Skyrail - Wiki", "Edit Skyrail"),
    ("/booking/", "Booking", "Booking"),
    ("/booking/bookings", "My bookings - Booking", "My bookings"),
])
def test_pages_render(client, path, title, h1):
    response = client.get(path)
    assert response.status_code == 200
    tree = check_page(response)
    assert tree.findtext(".//title") == title and tree.findtext(".//h1") == h1


def test_searches(client):
    shop = text(client.get("/shop/", params={"q": "MUG"}))
    assert "Blue Mug $8.50" in shop and "Steel Kettle" not in shop
    assert "No products match." in text(client.get("/shop/", params={"q": "zebra"}))
    wiki = parse(client.get("/wiki/", params={"q": "brisa"}))
    assert {a.text for a in wiki.iter("a")} >= {"Brisa", "Eldmark", "Skyrail", "Copper Owl"}
    assert "Mount Tarn" not in {a.text for a in wiki.iter("a")}


def test_order_end_to_end(server, episode, client):
    kettle = PRODUCTS[1]
    assert "Add to cart" in text(client.get(f"/shop/product/{kettle.id}"))
    for _ in range(2):
        cart = client.post("/shop/cart/add", data={"product_id": str(kettle.id), "quantity": "1"})
    assert cart.url.path == "/shop/cart"
    assert f"{kettle.name}, quantity 2: ${2 * kettle.price:.2f}" in text(cart)
    check_page(client.get("/shop/checkout"))
    placed = client.post("/shop/checkout", data={"name": "Ada", "address": "1 Main Street"})
    order_id = int(placed.url.path.rsplit("/", 1)[1])
    assert heading(placed) == f"Order {order_id} placed" and f"{kettle.name}, quantity 2" in text(placed)
    with closing(server.connect(episode)) as db:
        assert tuple(db.execute("SELECT name, address FROM orders WHERE id = ?", (order_id,)).fetchone()) == (
            "Ada", "1 Main Street")
        assert [tuple(r) for r in db.execute("SELECT product_id, quantity FROM order_items WHERE order_id = ?",
                                             (order_id,))] == [(kettle.id, 2)]
        assert db.execute("SELECT COUNT(*) FROM cart_items").fetchone()[0] == 0
    assert "Your cart is empty." in text(client.get("/shop/cart"))


def test_cart_remove(server, episode, client):
    for product in PRODUCTS[:2]:
        client.post("/shop/cart/add", data={"product_id": str(product.id), "quantity": "3"})
    cart = client.post("/shop/cart/remove", data={"product_id": str(PRODUCTS[0].id)})
    assert PRODUCTS[0].name not in text(cart) and PRODUCTS[1].name in text(cart)
    with closing(server.connect(episode)) as db:
        assert [tuple(r) for r in db.execute("SELECT * FROM cart_items")] == [(PRODUCTS[1].id, 3)]


def test_forum_reply_and_new_thread(server, episode, client):
    thread = client.post("/forum/thread/2", data={"author": "Zed", "body": "Try a <b>new</b> fuse."})
    assert thread.url.path == "/forum/thread/2" and "Zed: Try a <b>new</b> fuse." in text(thread)
    assert "<b>new</b>" not in thread.text  # user content is escaped
    created = client.post("/forum/new", data={"title": "Rainy days", "author": "Yara", "body": "Any indoor ideas?"})
    assert heading(created) == "Rainy days" and "Yara: Any indoor ideas?" in text(created)
    with closing(server.connect(episode)) as db:
        assert tuple(db.execute("SELECT thread_id, author FROM posts ORDER BY id DESC").fetchone()) == (2, "Zed")
        new_id = db.execute("SELECT id FROM threads WHERE title = 'Rainy days' AND author = 'Yara'").fetchone()[0]
    assert created.url.path == f"/forum/thread/{new_id}"
    index = text(client.get("/forum/"))
    replies = sum(p.thread_id == 2 for p in POSTS) + 1
    assert f"Kettle stopped working by Dana, {replies} replies" in index and "Rainy days by Yara, 0 replies" in index


def test_wiki_edit(server, episode, client):
    saved = client.post("/wiki/skyrail/edit", data={"text": "The Skyrail has 30 cabins."})
    assert saved.url.path == "/wiki/skyrail" and "The Skyrail has 30 cabins." in text(saved)
    with closing(server.connect(episode)) as db:
        body = db.execute("SELECT body FROM articles WHERE slug = 'skyrail'").fetchone()[0]
    assert body == "The Skyrail has 30 cabins."


def test_booking(server, episode, client):
    venue = VENUES[2]
    form = {"venue": str(venue.id), "date": "2026-12-18", "time": "20:00", "party_size": "4", "name": "Ada"}
    confirmed = client.post("/booking/", data=form)
    booking_id = int(confirmed.url.path.rsplit("/", 1)[1])
    assert f"Booking {booking_id} confirmed: {venue.name}, 2026-12-18 20:00, party of 4, name Ada" in text(confirmed)
    with closing(server.connect(episode)) as db:
        row = db.execute("SELECT venue_id, date, time, party_size, name FROM bookings WHERE id = ?", (booking_id,))
        assert tuple(row.fetchone()) == (venue.id, "2026-12-18", "20:00", 4, "Ada")
    assert f"Booking {booking_id}: {venue.name}" in text(client.get("/booking/bookings"))


def test_validation_errors(client):
    client.post("/shop/cart/add", data={"product_id": "1", "quantity": "1"})
    response = client.post("/shop/checkout", data={"name": "Ada", "address": " "})
    assert response.status_code == 400 and "Name and address are required." in text(response)
    assert parse(response).get_element_by_id("name").get("value") == "Ada"  # what was typed is kept
    booking = client.post("/booking/", data={"venue": "2", "date": "2026-12-04", "time": "18:00", "party_size": "3"})
    assert booking.status_code == 400 and "Name is required." in text(booking)
    assert parse(booking).xpath('//select[@id="venue"]/option[@selected]/text()') == [VENUES[1].name]
    bad_size = client.post("/booking/", data={"venue": "2", "date": "2026-12-04", "time": "18:00", "party_size": "9",
                                              "name": "Ada"})
    assert bad_size.status_code == 400 and "from the lists" in text(bad_size)
    reply = client.post("/forum/thread/1", data={"author": "", "body": "hi"})
    assert reply.status_code == 400 and "Name and reply are required." in text(reply)
    quantity = client.post("/shop/cart/add", data={"product_id": "1", "quantity": "lots"})
    assert quantity.status_code == 400 and "whole number" in text(quantity)
    for response in (response, booking, reply, quantity):
        check_page(response)


def test_episodes_are_isolated(server):
    first, second = server.new_episode(), server.new_episode()
    with httpx.Client(base_url=server.url, follow_redirects=True, cookies={"episode": first}) as client:
        client.post("/shop/cart/add", data={"product_id": "5", "quantity": "1"})
        client.post("/shop/checkout", data={"name": "Ada", "address": "1 Main Street"})
    with closing(server.connect(first)) as a, closing(server.connect(second)) as b, \
            closing(server.connect("default")) as default:
        assert a.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 1
        assert b.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 0
        assert default.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 0


def test_max_episodes_prunes_old_databases(tmp_path):
    server = WebServer(tmp_path, max_episodes=2)
    episodes = [server.new_episode() for _ in range(3)]
    assert sorted(p.stem for p in (tmp_path / "episodes").iterdir()) == sorted(episodes[1:])
    with pytest.raises(KeyError):
        server.connect(episodes[0])
    server.connect(episodes[2]).close()
    server.close()
    assert tmp_path.exists()  # a given directory is the caller's


def test_seeded_content(server, episode):
    with closing(server.connect(episode)) as db:
        assert len(db.execute("SELECT * FROM products").fetchall()) == len(PRODUCTS) == 24
        assert {r[0] for r in db.execute("SELECT DISTINCT category FROM products")} == set(CATEGORIES)
        assert db.execute("SELECT COUNT(*) FROM threads").fetchone()[0] == len(THREADS)
        assert db.execute("SELECT COUNT(*) FROM articles").fetchone()[0] == len(ARTICLES)
    assert len({p.name for p in PRODUCTS}) == len(PRODUCTS)
    assert len({t.author for t in THREADS} | {p.author for p in POSTS}) == len(THREADS) + len(POSTS)
    assert all(sum(p.category == c for p in PRODUCTS) == 8 for c in CATEGORIES)
    assert {p.thread_id for p in POSTS} == {t.id for t in THREADS}  # every thread has a first reply to ask about
    assert len({t.title for t in THREADS}) == len(THREADS) and len({a.title for a in ARTICLES}) == len(ARTICLES)
    bodies = {a.slug: a.body for a in ARTICLES}
    assert all(bodies[slug].count(answer) == 1 for slug, _, answer in WIKI_FACTS)  # stated once: unambiguous
    assert {slug for slug, _, _ in WIKI_FACTS} == set(bodies)


def test_crawl_every_page(server):
    """Every page reachable by links from / (default episode, GET only) renders and stays short."""
    seen, queue, titles = set(), ["/"], {}
    with httpx.Client(base_url=server.url) as client:
        while queue:
            path = queue.pop()
            if path in seen:
                continue
            seen.add(path)
            response = client.get(path)
            assert response.status_code == 200, path
            tree = check_page(response)
            titles.setdefault(tree.findtext(".//title"), path)
            for href in tree.xpath("//a/@href"):
                assert href.startswith("/"), href
                queue.append(urlsplit(urljoin(path, href)).path)
    # home, 4 site roots, cart, categories, products, new thread, threads, articles and their edit pages, bookings
    assert len(seen) == 1 + 4 + 1 + len(CATEGORIES) + len(PRODUCTS) + 1 + len(THREADS) + 2 * len(ARTICLES) + 1
    assert len(titles) == len(seen)  # every page has its own title


def test_unknown_pages(client):
    for path in ("/nowhere", "/shop/product/999", "/wiki/atlantis", "/forum/thread/99", "/shop/category/toys"):
        response = client.get(path)
        assert response.status_code == 404 and heading(response) == "Page not found"
        assert parse(response).xpath('//a[@href="/"]/text()') == ["Home"]


def test_shared_server():
    assert shared_server() is shared_server() and shared_server().url.startswith("http://127.0.0.1:")
