"""The web environment on the real local sites: scripted episodes through every action type, in the fast
HTTP mode and in headless Chromium (Playwright), with the success checks and progress milestones."""

from __future__ import annotations

import random
from urllib.parse import urljoin

import pytest

from autotelic.curricula import BanditCurriculum
from autotelic.curricula.failures import FailureCurriculum, frontier_task
from autotelic.envs.web.drivers import BrowserDriver, HttpDriver
from autotelic.envs.web.env import WebEnv
from autotelic.envs.web.page import parse_page, render
from autotelic.envs.web.sites import WebServer
from autotelic.heldout import HeldOut
from autotelic.rewards.web import WebProgress, WebSuccess, decision_tree
from autotelic.tasks.web import WEB_FAMILIES
from autotelic.types import Group, Sample, Task
from autotelic.web.actions import ActionError, parse_action

NO_HELDOUT = HeldOut(())


@pytest.fixture(scope="module")
def server():
    with WebServer() as running:
        yield running


def web_task(prompt: str, start: str, success: list[dict], progress: list[dict] | None = None) -> Task:
    return Task(prompt, "", "web_shop", 3, prompt, meta={"start": start, "success": success,
                                                         "progress": progress or []})


def element(env: WebEnv, label: str) -> int:
    """The number of the element labelled ``label`` on the current page (what a scripted agent reads)."""
    matches = [e.index for e in env.page.elements.values() if e.label == label]
    assert matches, f"no element {label!r} on {env.page.path}: {env.observation()}"
    return matches[0]


def run(env: WebEnv, task: Task, script: list) -> tuple[list[str], list[dict]]:
    """Play ``script`` (action strings, or functions of the env that return one); observations and facts."""
    observations, facts = [env.reset(task)], []
    for line in script:
        result = env.step(line(env) if callable(line) else line)
        observations.append(result.observation)
        facts.append(result.info)
        if result.done:
            break
    return observations, facts


ORDER = web_task("Order 2 x Blue Mug for Ada Moss, 4 Elm Road.", "/shop/",
                 [{"sql": "SELECT COUNT(*) FROM orders o JOIN order_items i ON i.order_id = o.id WHERE "
                          "i.product_id = 1 AND i.quantity = 2 AND o.name = 'Ada Moss' AND o.address = '4 Elm Road'"}],
                 [{"url": "/shop/product/1"}, {"sql": "SELECT quantity FROM cart_items WHERE product_id = 1"},
                  {"field": "Name", "value": "Ada Moss"}])
ORDER_SCRIPT = [
    lambda env: f"click({element(env, 'Kitchen')})",
    lambda env: f"I should open it: click [{element(env, 'Blue Mug')}]",
    lambda env: f'type({element(env, "Quantity")}, "2")',
    lambda env: f"click({element(env, 'Add to cart')})",
    lambda env: f"click({element(env, 'Checkout')})",
    lambda env: f"type({element(env, 'Name')}, 'Ada Moss')",
    lambda env: f'type({element(env, "Address")}, "4 Elm Road")',
    lambda env: f"click({element(env, 'Place order')})",
]
BOOKING = web_task("Book Sakura House on 2026-12-18 at 20:00 for 3 people, name Cleo Vance.", "/booking/",
                   [{"sql": "SELECT COUNT(*) FROM bookings WHERE venue_id = 3 AND date = '2026-12-18' AND "
                            "time = '20:00' AND party_size = 3 AND name = 'Cleo Vance'"}],
                   [{"field": "Venue", "value": "Sakura House"}, {"field": "Time", "value": "20:00"}])
BOOKING_SCRIPT = [
    lambda env: f'select({element(env, "Venue")}, "Sakura House")',
    lambda env: f'select({element(env, "Date")}, "2026-12-18")',
    lambda env: f'select({element(env, "Time")}, "20:00")',
    lambda env: f'select({element(env, "Party size")}, "3")',
    lambda env: f'type({element(env, "Name")}, "Cleo Vance")',
    lambda env: f"click({element(env, 'Book')})",
]
WIKI = web_task("How many cabins does the Skyrail have?", "/wiki/", [{"answer": "24"}], [{"url": "/wiki/skyrail"}])
WIKI_SCRIPT = [
    "scroll(down)", "scroll(up)", 'goto("/wiki/brisa")', "back()",
    lambda env: f"click({element(env, 'Skyrail')})",
    "the answer is answer(24)",
]
MISTAKES = web_task("Reply 'Great idea' to the thread 'Book club picks' as Dev Rao.", "/forum/",
                    [{"sql": "SELECT COUNT(*) FROM posts WHERE thread_id = 5 AND author = 'Dev Rao' AND "
                             "body = 'Great idea'"}])
MISTAKES_SCRIPT = [
    "I am not sure what to do",  # no action
    "click(99)",  # no such element
    lambda env: f'type({element(env, "Book club picks")}, "x")',  # typing into a link
    'goto("http://example.com/")',  # another host
    "back()",  # no history yet
    lambda env: f"click({element(env, 'Book club picks')})",
    lambda env: f"click({element(env, 'Your name')})",  # focusing a field: interactive, nothing changes
    lambda env: f'type({element(env, "Your name")}, "Dev Rao")',
    lambda env: f'type({element(env, "Reply")}, "Great idea")',
    lambda env: f"click({element(env, 'Post reply')})",
]
SCRIPTS = {"order": (ORDER, ORDER_SCRIPT), "booking": (BOOKING, BOOKING_SCRIPT), "wiki": (WIKI, WIKI_SCRIPT),
           "mistakes": (MISTAKES, MISTAKES_SCRIPT)}
VIEWPORTS = {"wiki": 6}  # a short viewport, so that scrolling moves it


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_scripted_episode_succeeds_over_http(server, name):
    task, script = SCRIPTS[name]
    env = WebEnv("html", server, viewport=VIEWPORTS.get(name, 30))
    observations, facts = run(env, task, script)
    assert facts[-1]["success"], observations[-2:]
    assert env.done and env.driver is None  # the episode ended on success (or the answer) and let go of the site
    if name == "order":
        assert facts[2]["page_changed"] and not facts[2]["url_changed"]  # typing shows the value on the page
        assert '"2"' in observations[3]
        assert facts[-1]["milestones"] == 3 and facts[-1]["url"].startswith("/shop/order/")
    if name == "wiki":
        assert facts[0]["page_changed"] and "more lines below" in observations[0]  # a 6-line viewport scrolls
        assert facts[2]["url"] == "/wiki/brisa" and facts[3]["url"] == "/wiki/" and facts[3]["url_changed"]
        assert facts[-1]["answer"] == "24"
    if name == "mistakes":
        assert [f["valid"] for f in facts[:5]] == [False] * 5
        assert "no action found" in facts[0]["error"] and "no element [99]" in facts[1]["error"]
        assert "is a link" in facts[2]["error"] and "this site" in facts[3]["error"]
        assert observations[2].startswith("Error:")
        assert facts[6]["interactive"] and not facts[6]["page_changed"]
        assert observations[7] == "(the page did not change)"


def test_state_is_per_episode(server):
    """An order placed in one episode is absent from the next episode's site."""
    env = WebEnv("html", server)
    run(env, ORDER, ORDER_SCRIPT)
    first = env.episode
    fresh = WebEnv("html", server)
    fresh.reset(ORDER)
    count = "SELECT COUNT(*) FROM orders"
    assert server.connect(first).execute(count).fetchone()[0] == 1
    assert server.connect(fresh.episode).execute(count).fetchone()[0] == 0


def test_wrong_answer_and_wrong_field_do_not_succeed(server):
    env = WebEnv("html", server)
    _, facts = run(env, WIKI, [lambda env: f"click({element(env, 'Skyrail')})", 'answer("12")'])
    assert facts[0]["new_milestones"] == 1 and not facts[-1]["success"] and env.done
    _, facts = run(WebEnv("html", server), BOOKING, [lambda env: f'select({element(env, "Venue")}, "Fern Cafe")',
                                                     lambda env: f'select({element(env, "Venue")}, "Nowhere")'])
    assert facts[0]["valid"] and facts[0]["new_milestones"] == 0
    assert not facts[1]["valid"] and "options: Olive Table" in facts[1]["error"]


def test_decision_tree_rules():
    penalty = 0.1
    assert decision_tree({"valid": False}, penalty) == -penalty
    assert decision_tree({"valid": True, "url_changed": True}, penalty) == 0.0
    assert decision_tree({"valid": True, "interactive": True}, penalty) == 0.0
    assert decision_tree({"valid": True, "page_changed": False}, penalty) == -penalty
    assert decision_tree({"valid": True, "page_changed": True, "new_milestones": 1}, penalty) == 0.0
    assert decision_tree({"valid": True, "page_changed": True, "echoes_task": True}, penalty) == 0.0
    assert decision_tree({"valid": True, "page_changed": True, "new_milestones": 0}, penalty) == -penalty


def test_progress_and_success_rewards_read_the_trajectory(server):
    """A full order earns success and every milestone; a stray episode earns penalties only."""
    samples = []
    for script in (ORDER_SCRIPT, ["click(99)", "scroll(down)", lambda env: f"click({element(env, 'Kitchen')})"]):
        _, facts = run(WebEnv("html", server), ORDER, script)
        samples.append(Sample("", [], [], True, info={"steps": facts}))
    group = Group(ORDER, [], samples)
    assert WebSuccess()(group) == [1.0, 0.0]
    progress = WebProgress(step_penalty=0.1, milestone_weight=0.5)(group)
    assert progress[0] == pytest.approx(0.5)  # every step changed the URL, clicked or reached a milestone
    assert progress[1] == pytest.approx(-0.2)  # the failed click and the scroll that moved nothing


def test_generated_tasks_have_valid_checks(server):
    """Every family and level makes tasks whose start page loads and whose checks evaluate."""
    for family in WEB_FAMILIES.values():
        for level in family.levels:
            task = family.generate(random.Random(level), level)
            env = WebEnv("html", server)
            observation = env.reset(task)
            assert task.prompt in observation and "URL: " + task.meta["start"] in observation
            result = env.step("scroll(down)")
            assert not result.info["success"], task.prompt  # nothing is done before the agent acts
            env.close()


def test_every_task_is_solved_by_its_scripted_solution(server):
    """The ``solution`` column each task carries (what guided rollouts hint at or demonstrate) solves it on the
    live site, action for action with none left over; and, since the environment ends an episode once its
    check holds, it also solves the easier tasks the failure curriculum cuts from it."""
    played = 0
    for family in WEB_FAMILIES.values():
        for level in family.levels:
            rng = random.Random(level)
            for _ in range(3):
                task = family.generate(rng, level)
                actions = task.meta["columns"]["solution"].splitlines()
                for solved in [task, *filter(None, (frontier_task(task, cut)
                                                    for cut in range(len(task.meta["progress"]))))]:
                    _, facts = run(WebEnv("html", server), solved, actions)
                    assert facts[-1]["success"], (solved.prompt, actions, facts[-1])
                    assert all(f["valid"] for f in facts), (solved.prompt, [f["error"] for f in facts])
                    assert solved is not task or len(facts) == len(actions), (task.prompt, len(facts))
                    played += 1
    assert played > 50


def test_levels_one_and_two_hold_room_for_a_heldout_set():
    """Distinct tasks (uids) per family and level: a held-out set of 64 (8 per cell) leaves some to train on."""
    counts = {}
    for name, family in WEB_FAMILIES.items():
        for level in (1, 2):
            rng = random.Random(0)
            counts[name, level] = len({family.generate(rng, level).uid for _ in range(2000)})
    assert counts == {("web_shop", 1): 48, ("web_shop", 2): 48, ("web_forum", 1): 32, ("web_forum", 2): 16,
                      ("web_wiki", 1): 32, ("web_wiki", 2): 32, ("web_booking", 1): 9, ("web_booking", 2): 9}
    rng = random.Random(0)
    fields = {WEB_FAMILIES["web_booking"].generate(rng, 1).meta["success"][0]["field"] for _ in range(100)}
    assert fields == {"Venue", "Date", "Time"}  # level 1 is one select of any of the three


def test_action_parser():
    assert str(parse_action("click [4]")) == "click(4)"
    assert str(parse_action('type(5, "a (b), c")')) == 'type(5, "a (b), c")'
    assert str(parse_action("answer(8.50)")) == 'answer("8.50")'
    assert str(parse_action("then select(2, 19:00).")) == 'select(2, "19:00")'
    assert parse_action('Action: click "Blue Mug" and then').label == "Blue Mug"  # an element named by its label
    assert str(parse_action('type("Name", "Ada")')) == 'type("Name", "Ada")'
    for bad in ("type(3)", "click()", "scroll(left)", "nothing"):
        with pytest.raises(ActionError):
            parse_action(bad)


def test_elements_named_by_label(server):
    env = WebEnv("html", server)
    env.reset(WIKI)
    result = env.step('Action: click("skyrail")')  # case does not matter
    assert result.info["valid"] and result.info["url"] == "/wiki/skyrail"
    env.step("back()")
    assert "no element" in env.step('click("Sky rail")').info["error"]
    ambiguous = env.step('click("en")')  # too short to match inside labels
    assert not ambiguous.info["valid"]
    assert "2 elements" in env.step('click("var")').info["error"]  # Lake Varden, Varden Festival


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_browser_and_http_modes_agree(server, name):
    """Headless Chromium and plain HTTP give the same observations and step facts on every step."""
    task, script = SCRIPTS[name]
    viewport = VIEWPORTS.get(name, 30)
    http = run(WebEnv("html", server, viewport=viewport), task, script)
    browser = run(WebEnv("browser", server, viewport=viewport), task, script)
    assert browser == http
    assert browser[1][-1]["success"]


@pytest.mark.slow
def test_every_page_reads_the_same_in_the_browser(server):
    """Crawl every page reachable by links from the home page: the live DOM of headless Chromium and the
    served HTML give the same observation."""
    cookies = {"episode": server.new_episode()}
    http, browser = HttpDriver(server.url, cookies), BrowserDriver(server.url, cookies)
    seen, queue = set(), [server.url + "/"]
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        seen.add(url)
        served, live = parse_page(*http.open(url)), parse_page(*browser.open(url))
        assert render(live, {}) == render(served, {}), url
        queue.extend(urljoin(url, e.href) for e in served.elements.values() if e.kind == "link")
    http.close()
    browser.close()
    assert len(seen) > 40


def test_failed_tasks_are_cut_at_their_frontier(server):
    """WebRL-style curriculum: a failed order becomes "open the page, then add it to the cart" when no
    episode got past the product page; the cut task's check is the parent's own milestone, and it is
    solvable on the site."""
    order = WEB_FAMILIES["web_shop"].generate(random.Random(0), 3)
    product = order.meta["progress"][0]["url"]
    samples = []
    for script in (["click(99)"], [lambda env: f"click({element(env, 'Kitchen')})"]):
        _, facts = run(WebEnv("html", server), order, script)
        samples.append(Sample("", [], [], True, info={"steps": facts}))
    curriculum = FailureCurriculum(BanditCurriculum(["web_shop"], [1], 0, NO_HELDOUT), NO_HELDOUT, fraction=0.5)
    assert curriculum.observe([Group(order, [], samples)])["failures/made_total"] == 1.0
    first, = curriculum.next_tasks(2)[:1]
    assert first.meta["success"] == [order.meta["progress"][0]] and first.meta["progress"] == []
    assert first.prompt.startswith("Open the page of the ") and first.meta["parent"] == order.uid
    # once an episode reached the product page, the next cut also asks for the cart
    name = first.prompt.removeprefix("Open the page of the ").rstrip(".")
    opened = run(WebEnv("html", server), order, [lambda env: f'goto("{product}")'])[1]
    group = Group(order, [], [Sample("", [], [], True, info={"steps": opened})])
    curriculum.observe([group])
    second = curriculum.next_tasks(2)[0]
    assert second.prompt == f"Open the page of the {name}, then add the {name} to the cart."
    solved = run(WebEnv("html", server), second, [f'goto("{product}")',
                                                  lambda env: f"click({element(env, 'Add to cart')})"])[1]
    assert solved[-1]["success"] and solved[-1]["milestones"] == 1
    derived = Group(second, [], [Sample("", [], [], True, info={"steps": solved})])
    assert curriculum.observe([derived])["failures/derived_success"] == 1.0
    state = curriculum.state_dict()
    restored = FailureCurriculum(BanditCurriculum(["web_shop"], [1], 0, NO_HELDOUT), NO_HELDOUT, fraction=0.5)
    restored.load_state_dict(state)
    assert restored.made == curriculum.made and list(restored.queue) == list(curriculum.queue)


def test_each_step_names_the_state_it_left_where_its_observation_does_not(server):
    """GiGPO's anchor states (algorithm.turn_baseline=state): two episodes on the same page with the same progress
    are in one state whatever route they took; an error or an unchanged page is an observation, not a state."""
    env = WebEnv(server=server)
    kitchen = lambda env: f"click({element(env, 'Kitchen')})"  # noqa: E731
    _, direct = run(env, ORDER, [kitchen])
    seen, detour = run(env, ORDER, ["dance()", kitchen, "back()", kitchen])
    assert seen[1].startswith("Error") and detour[0]["state"] != direct[0]["state"]
    assert detour[1]["state"] == detour[3]["state"] == direct[0]["state"]  # the kitchen page, reached twice
    _, stuck = run(env, ORDER, [kitchen, "scroll(up)", "goto(\"/shop/\")", "scroll(up)"])
    assert stuck[1]["page_changed"] is False and stuck[3]["page_changed"] is False
    assert stuck[1]["state"] == direct[0]["state"] and stuck[3]["state"] == detour[2]["state"] != stuck[1]["state"]
    _, product = run(env, ORDER, [kitchen, lambda env: f"click({element(env, 'Blue Mug')})", "back()"])
    assert product[1]["milestones"] == 1 and product[2]["state"] != direct[0]["state"]  # the kitchen, one milestone on
