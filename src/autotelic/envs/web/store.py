"""The sites' databases: one SQLite file per episode, copied from a template seeded from ``content``.

Each episode (the ``episode`` cookie) has its own file, so parallel episodes never see each other's orders,
posts or bookings; a request without a known episode uses the shared default database.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
import uuid
from collections import OrderedDict
from dataclasses import astuple
from pathlib import Path

from autotelic.web.content import ARTICLES, POSTS, PRODUCTS, THREADS, VENUES

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


def open_database(path: Path) -> sqlite3.Connection:
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
