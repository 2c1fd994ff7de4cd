"""How the web environment reaches the site: ``HttpDriver`` (fast: HTTP requests and HTML, for CPU
training) or ``BrowserDriver`` (a real headless Chromium through Playwright). Both return the page's
HTML after every action and the env reads it with the same parser, so their observations agree.

A driver acts on elements the env has already checked (an ``Element`` of the current page) and raises
``DriverError`` when the site cannot be reached or the action cannot be carried out.
"""

from __future__ import annotations

import atexit
import os
from typing import Protocol
from urllib.parse import urlencode, urljoin

import httpx

from autotelic.envs.web.page import Element, Page

CHROMIUM = os.environ.get("AUTOTELIC_CHROMIUM", "/usr/bin/chromium")
# Headless on a machine without network: Chromium's background connections would only be refused.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
TIMEOUT_S = 10.0


class DriverError(RuntimeError):
    pass


class Driver(Protocol):
    def open(self, url: str) -> tuple[str, str]:
        """Load ``url``; returns (html, final url)."""
        ...

    def click(self, page: Page, element: Element, values: dict[str, str]) -> tuple[str, str]:
        """Follow a link or submit a button's form with ``values`` (typed values by XPath)."""
        ...

    def fill(self, element: Element, value: str) -> None:
        """Set a control's value (the browser types it; plain HTTP keeps it for the next submit)."""
        ...

    def close(self) -> None: ...


def form_data(page: Page, button: Element, values: dict[str, str]) -> list[tuple[str, str]]:
    """What a browser submits for ``button``'s form: its hidden fields, every named control's current value
    (checkboxes only when checked), then the button's own name and value."""
    data = list(page.hidden.get(button.form or "", []))
    for index in page.forms.get(button.form or "", []):
        element = page.elements[index]
        if element.kind in ("button", "link") or not element.name:
            continue
        value = values.get(element.xpath, element.value)
        if element.kind == "checkbox" and not value:
            continue
        data.append((element.name, value or ("on" if element.kind == "checkbox" else "")))
    if button.name:
        data.append((button.name, button.value))
    return data


class HttpDriver:
    """Plain HTTP: links are GETs, buttons submit their form as a browser would (hidden fields included)."""

    def __init__(self, base_url: str, cookies: dict[str, str]) -> None:
        self.client = httpx.Client(base_url=base_url, cookies=cookies, follow_redirects=True, timeout=TIMEOUT_S)

    def _request(self, method: str, url: str, data: list[tuple[str, str]] | None = None) -> tuple[str, str]:
        try:
            if method == "POST":
                response = self.client.post(url, content=urlencode(data or []),
                                            headers={"content-type": "application/x-www-form-urlencoded"})
            else:
                response = self.client.get(url.split("?")[0] + "?" + urlencode(data) if data else url)
        except httpx.HTTPError as error:
            raise DriverError(f"the site did not answer: {type(error).__name__}") from None
        return response.text, str(response.url)

    def open(self, url: str) -> tuple[str, str]:
        return self._request("GET", url)

    def click(self, page: Page, element: Element, values: dict[str, str]) -> tuple[str, str]:
        if element.kind == "link":
            return self._request("GET", urljoin(page.url, element.href or ""))
        method, action = page.methods.get(element.form or "", ("GET", ""))
        return self._request(method, urljoin(page.url, action or page.url), form_data(page, element, values))

    def fill(self, element: Element, value: str) -> None:
        pass  # the env keeps the value and click() submits it

    def close(self) -> None:
        self.client.close()


class _Chromium:
    """One headless Chromium per process, started on first use; each episode gets its own context."""

    def __init__(self) -> None:
        self.playwright = None
        self.browser = None

    def get(self):
        if self.browser is None:
            from playwright.sync_api import sync_playwright

            if not os.path.exists(CHROMIUM):
                raise DriverError(f"no Chromium at {CHROMIUM} (install Debian's chromium, or set AUTOTELIC_CHROMIUM)")
            self.playwright = sync_playwright().start()
            self.browser = self.playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                          args=CHROMIUM_ARGS)
            atexit.register(self.stop)
        return self.browser

    def stop(self) -> None:
        if self.browser is not None:
            self.browser.close()
            self.playwright.stop()
            self.browser = self.playwright = None


_CHROMIUM = _Chromium()


class BrowserDriver:
    """A real browser: clicks and typing go through Playwright, and the HTML is the live DOM."""

    def __init__(self, base_url: str, cookies: dict[str, str]) -> None:
        from playwright.sync_api import Error

        self._error = Error
        self.context = _CHROMIUM.get().new_context(base_url=base_url)
        self.context.add_cookies([{"name": k, "value": v, "url": base_url} for k, v in cookies.items()])
        self.context.set_default_timeout(TIMEOUT_S * 1000)
        self.page = self.context.new_page()

    def _html(self) -> tuple[str, str]:
        self.page.wait_for_load_state("load")
        return self.page.content(), self.page.url

    def open(self, url: str) -> tuple[str, str]:
        try:
            self.page.goto(url)
        except self._error as error:
            raise DriverError(f"the site did not answer: {error.message.splitlines()[0]}") from None
        return self._html()

    def click(self, page: Page, element: Element, values: dict[str, str]) -> tuple[str, str]:
        try:
            self.page.locator(f"xpath={element.xpath}").click()
        except self._error as error:
            raise DriverError(f"the click did not go through: {error.message.splitlines()[0]}") from None
        return self._html()

    def fill(self, element: Element, value: str) -> None:
        locator = self.page.locator(f"xpath={element.xpath}")
        try:
            if element.kind == "select":
                locator.select_option(value=value)
            elif element.kind == "checkbox":
                locator.set_checked(bool(value))
            else:
                locator.fill(value)
        except self._error as error:
            raise DriverError(f"could not set the value: {error.message.splitlines()[0]}") from None

    def screenshot(self) -> bytes:
        """The whole page as PNG (the site's pages are short: the view's scroll position does not matter)."""
        return self.page.screenshot(type="png", full_page=True)

    def close(self) -> None:
        self.context.close()
