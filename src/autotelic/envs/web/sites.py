"""Four small web sites (shop, forum, wiki, booking: a module each) in one Flask app, served on localhost by
``WebServer``.

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
from pathlib import Path
from typing import Any

from flask import Flask, render_template
from jinja2 import DictLoader
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from autotelic.envs.web import booking, forum, shop, wiki
from autotelic.envs.web.store import EpisodeStore, open_database
from autotelic.envs.web.views import LAYOUT_TEMPLATES, SITES, close_db, money, page

TEMPLATES = {
    **LAYOUT_TEMPLATES,
    "home.html": """{% extends "base.html" %}{% block main %}<ul>
{% for text, href in sites %}<li><a href="{{ href }}">{{ text }}</a></li>
{% endfor %}</ul>{% endblock %}""",
    "error.html": """{% extends "base.html" %}{% block main %}<p><a href="/">Home</a></p>{% endblock %}""",
    **shop.TEMPLATES, **forum.TEMPLATES, **wiki.TEMPLATES, **booking.TEMPLATES,
}
ERROR_HEADINGS = {404: "Page not found", 405: "Method not allowed"}


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
    app.teardown_appcontext(close_db)
    app.register_error_handler(HTTPException, error_page)
    app.add_url_rule("/", view_func=home)
    for site in (shop, forum, wiki, booking):
        app.register_blueprint(site.blueprint)
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
        return open_database(path)

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
