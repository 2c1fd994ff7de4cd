"""The web environment: a task on a live local site, acted on through a driver, one page at a time.

Every episode gets a fresh copy of the site's database (``WebServer.new_episode``), so orders placed or
posts made in one episode are absent from the next. Each step records the facts the Filter stage's web
rewards read (``rewards/web.py``): whether the action executed, whether the URL or the page changed,
whether a click hit an interactive element, the milestones reached and whether the task's success check
holds. The environment itself pays nothing: step rewards are 0 and the rewards are Filter-stage parts.

An episode ends on ``answer(...)``, or as soon as the success check holds when ``end_on_success`` (tasks
that change the site's state need no answer).

With ``screenshot`` (browser mode only) each observation of a page also carries a screenshot of the whole page,
as an image marker (``backends/vision.py``) that a vision-language policy reads as the image (OpAgent's
screenshot observation); the text view stays, since the actions name its element numbers.
"""

from __future__ import annotations

import hashlib
from functools import partial
from typing import Any
from urllib.parse import urljoin, urlsplit

from autotelic.backends.vision import image_marker
from autotelic.envs import Step
from autotelic.envs.registry import EnvironmentSpec
from autotelic.envs.web.checks import SiteState, check_condition
from autotelic.envs.web.drivers import BrowserDriver, Driver, DriverError, HttpDriver
from autotelic.envs.web.page import Element, parse_page, render, visible_indices
from autotelic.envs.web.sites import WebServer, shared_server
from autotelic.types import Task
from autotelic.web.actions import ACTION_HELP, Action, ActionError, parse_action

VIEWPORT_LINES = 30
MODES = ("html", "browser")


def intro(task: Task) -> str:
    return f"You are a web agent. Task: {task.prompt}\n{ACTION_HELP}"


def state_key(path: str, view: str, reached: set[int]) -> str:
    """The state an action leaves, for grouping turns by state (GiGPO's anchor states): the page, what the agent
    sees of it (typed values and scroll included) and the task's milestones reached so far, which an unchanged
    page or an error message leaves out of the observation the agent is sent."""
    return hashlib.sha256(f"{path}\n{sorted(reached)}\n{view}".encode()).hexdigest()[:16]


class WebEnv:
    def __init__(self, mode: str = "html", server: WebServer | None = None, viewport: int = VIEWPORT_LINES,
                 end_on_success: bool = True, screenshot: bool = False) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown web mode '{mode}'; valid: {', '.join(MODES)}")
        if screenshot and mode != "browser":
            raise ValueError("screenshots need a browser: use generate.env=web_screenshot (or web_browser)")
        self.mode, self.viewport, self.end_on_success, self.screenshot = mode, viewport, end_on_success, screenshot
        self._server = server
        self.driver: Driver | None = None

    # ---- episode ---------------------------------------------------------------------------
    def reset(self, task: Task) -> str:
        if self.driver is not None:
            self.driver.close()
        self.server = self._server or shared_server()
        self.task, self.episode = task, self.server.new_episode()
        make = HttpDriver if self.mode == "html" else BrowserDriver
        self.driver = make(self.server.url, {"episode": self.episode})
        self.values: dict[str, str] = {}
        self.offset, self.history, self.answer = 0, [], None
        self.reached: set[int] = set()
        self.done = False
        self._load(*self.driver.open(urljoin(self.server.url, task.meta.get("start", "/"))))
        return f"{intro(task)}\n\n{self._seen(self.observation())}"

    def observation(self) -> str:
        return render(self.page, self.values, self.offset, self.viewport)

    def _seen(self, view: str) -> str:
        """What the agent is shown of the page: its text ``view``, then its screenshot when ``screenshot``."""
        if not self.screenshot:
            return view
        assert isinstance(self.driver, BrowserDriver)  # screenshot implies browser mode (__init__)
        return f"{view}\n{image_marker(self.driver.screenshot())}"

    def step(self, action_text: str) -> Step:
        if self.driver is None or self.done:
            raise RuntimeError("step() before reset() or after the episode ended")
        before, url_before = self.observation(), self.page.path
        facts: dict[str, Any] = {"valid": True, "error": None, "interactive": False, "url_before": url_before}
        try:
            action = parse_action(action_text)
            facts["action"] = str(action)
            facts["interactive"] = self._act(action)
            # a value the task itself names, typed or chosen: a rule-based sign of progress
            facts["echoes_task"] = (action.kind in ("type", "select") and bool(action.text.strip())
                                    and action.text.strip().lower() in self.task.prompt.lower())
        except (ActionError, DriverError) as error:
            facts.update(valid=False, error=str(error), action=None)
        observation = self.observation()
        facts.update(url=self.page.path, url_changed=self.page.path != url_before, page_changed=observation != before)
        state = SiteState(self.page, self.values, self.answer, lambda: self.server.connect(self.episode))
        progress = self.task.meta.get("progress", [])
        new = {i for i, c in enumerate(progress) if i not in self.reached and check_condition(c, state)}
        self.reached |= new
        success = all(check_condition(c, state) for c in self.task.meta.get("success", []))
        facts.update(new_milestones=len(new), milestones=len(self.reached), milestones_total=len(progress),
                     reached=sorted(self.reached), success=success, answer=self.answer,
                     state=state_key(self.page.path, observation, self.reached))
        self.done = self.answer is not None or success and self.end_on_success
        if self.done:
            self.driver.close()
            self.driver = None
            return Step("episode over", 0.0, True, facts)
        if not facts["valid"]:
            return Step(f"Error: {facts['error']}", 0.0, False, facts)
        return Step(self._seen(observation) if facts["page_changed"] else "(the page did not change)", 0.0, False, facts)

    # ---- actions ---------------------------------------------------------------------------
    def _load(self, html: str, url: str) -> None:
        self.page, self.values, self.offset = parse_page(html, url), {}, 0

    def _navigate(self, html_url: tuple[str, str]) -> None:
        self.history.append(self.page.url)
        self._load(*html_url)

    def _element(self, action: Action) -> Element:
        """The element ``action`` names, by number or by label (exact, else the one label containing it)."""
        visible = visible_indices(self.page, self.offset, self.viewport)
        if action.element is None:
            wanted = action.label.lower()
            exact = [i for i in visible if self.page.elements[i].label.lower() == wanted]
            partial = [i for i in visible if len(wanted) >= 3 and wanted in self.page.elements[i].label.lower()]
            found = exact or partial
            if len(found) != 1:
                problem = "no element" if not found else f"{len(found)} elements"
                raise ActionError(f'{problem} named "{action.label}" in view; use the number in brackets')
            return self.page.elements[min(found)]
        element = self.page.elements.get(action.element)
        if element is None:
            raise ActionError(f"there is no element [{action.element}] on this page")
        if action.element not in visible:
            raise ActionError(f"element [{action.element}] is not in view: scroll first")
        return element

    def _act(self, action: Action) -> bool:
        """Carry out ``action``; returns whether it was a click on an interactive element."""
        if action.kind == "answer":
            self.answer = action.text
        elif action.kind == "scroll":
            step = self.viewport // 2 if action.text == "down" else -(self.viewport // 2)
            self.offset = max(0, min(self.offset + step, max(0, len(self.page.lines) - self.viewport)))
        elif action.kind == "goto":
            url = urljoin(self.server.url + "/", action.text)
            if urlsplit(url).netloc != urlsplit(self.server.url).netloc:
                raise ActionError("only this site's pages can be opened")
            self._navigate(self.driver.open(url))
        elif action.kind == "back":
            if not self.history:
                raise ActionError("there is no page to go back to")
            self._load(*self.driver.open(self.history.pop()))
        elif action.kind == "click":
            element = self._element(action)
            if element.kind in ("link", "button") and (element.kind == "link" or element.form is not None):
                self._navigate(self.driver.click(self.page, element, self.values))
            elif element.kind == "checkbox":
                self._set(element, "" if self.values.get(element.xpath, element.value) else "on")
            return True  # clicking a field focuses it: an interactive element, though nothing changes
        elif action.kind == "type":
            element = self._element(action)
            if element.kind not in ("input", "textarea"):
                raise ActionError(f"[{element.index}] is a {element.kind}; type into an input or textarea")
            self._set(element, action.text)
        elif action.kind == "select":
            element = self._element(action)
            if element.kind != "select":
                raise ActionError(f"[{element.index}] is a {element.kind}; select works on a select")
            wanted = action.text.strip().lower()
            value = next((v for v, text in element.options if wanted in (v.lower(), text.lower())), None)
            if value is None:
                options = ", ".join(text for _, text in element.options)
                raise ActionError(f"[{element.index}] has no option '{action.text}'; options: {options}")
            self._set(element, value)
        return False

    def _set(self, element: Element, value: str) -> None:
        self.driver.fill(element, value)
        self.values[element.xpath] = value

    def close(self) -> None:
        if self.driver is not None:
            self.driver.close()
            self.driver = None



def load_environment(driver: str = "html", screenshot: bool = False) -> EnvironmentSpec:
    """The web_* families on the local sites, read over plain HTTP (html) or in headless Chromium (browser), with
    a screenshot of the page in each observation (``screenshot``, browser only) for vision-language policies."""
    return EnvironmentSpec(partial(WebEnv, driver, screenshot=screenshot))
