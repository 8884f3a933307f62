"""The dashboard in headless Chromium, against `tickwork serve` with real ticks behind it.

`tickwork run` runs a level whose first tick completes (spend for the chart) and whose
next one calls a tool and then hangs on a slow upstream (a running tick); another level
had a tick fail and is paused. The page must load without console errors, show the live
scheduler, the running tick with a live runtime, each level's health, the spend chart and
the latest digest; its buttons pause and resume levels, run a failed tick again and start
one now. The running tick's page shows its story as it happens and its cancel button ends
it. Screenshots of the dashboard, a running tick's page, an ended one's, the tick list and
the latest (styled HTML) digest are taken every run;
with TICKWORK_KEEP_SCREENSHOTS=1 they replace the ones kept in tests/artifacts/ (a run
would otherwise leave the committed pictures changed in every checkout).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from harness.contracts.events import tick_stream
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.projections.levels import level_paused
from harness.store import open_store
from tests import web
from tests.api_support import TOKEN, serving, settings_for
from tests.commands import (
    Output,
    environment,
    forked_cli,
    free_port,
    serve,
    start_service,
    write_config,
)
from tests.waiting import DEADLINE_SECONDS, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
KEPT = Path(__file__).parent / "artifacts"


def screenshot_folder(tmp_path: Path) -> Path:
    """tests/artifacts/ when asked to keep the pictures, else the test's own folder."""
    return KEPT if os.environ.get("TICKWORK_KEEP_SCREENSHOTS") == "1" else tmp_path


LEVELS = """
[levels.busy]
every = "2s"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 120
can_shell = true

[levels.idle]
every = "1h"
prompt = "Nothing to do."
model = "fake-model"

[digests.daily]
every = "3s"
period = "1h"
levels = ["busy"]
format = "html"

[api]
public_url = "https://tickwork.example"
"""
# The test adds `port = …` to [api]: the banner of `tickwork run` names that address.


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        message = f"{', '.join(missing)} missing: apt-get install chromium chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {message} (.ci/run installs them)")
        pytest.skip(message)
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1400"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def seen(driver: WebDriver, css: str, attribute: str = "", click: bool = False) -> str:
    """The text (or an attribute) of the element `css` selects, clicked if asked.

    "" while there is none, or while the page's refresh is replacing it.
    """
    try:
        element = driver.find_element(By.CSS_SELECTOR, css)
        if click:
            element.click()
            return "clicked"
        return (element.get_attribute(attribute) if attribute else element.text) or ""
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


@pytest.mark.long
def test_a_new_operators_path_through_the_dashboard(tmp_path: Path, browser: WebDriver) -> None:
    """One browser session, the path a first hour takes (one session: Chromium starts once).

    The banner's URL opens the page; the liveness panel shows the scheduler; the running
    tick shows its live runtime, its page its story (no missing result while it runs) and
    its cancel ends it; a level is paused and resumed from the page; a failed tick is run
    again from its page; the tick list shows run times and costs and finds ticks by text;
    once the service stops, the page says no scheduler runs.
    """
    port = free_port()
    config = write_config(tmp_path, LEVELS + f"port = {port}\n")
    shots = screenshot_folder(tmp_path)
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    fake = FakeUpstream().start()
    echo = Step(tool_calls=[ToolCallSpec(name="shell", arguments={"command": "echo checked"})])
    fake.script("default", [Step(text="All quiet."), echo] + [Step(text="late", delay=60)] * 10)
    fake.script("idle-broken", [Step(status=401, error_message="Incorrect API key provided")])
    broken = forked_cli("tick idle --tick-id idle-broken", config, fake)
    assert broken.returncode == 1 and "status  failed" in broken.stdout, broken.stdout
    assert forked_cli("pause idle", config, fake).returncode == 0
    service = Output(start_service(config, fake))
    banner = service.wait_for("dashboard `tickwork serve`").split("then ")[1].strip()
    try:
        # The server's own ticks (run again, run now) talk to the scripted fake too: a slow
        # answer keeps each running until the page cancels it.
        server_env = environment(TICKWORK_CONFIG=str(config), OPENAI_BASE_URL=fake.url)
        with serve(tmp_path, env=server_env, port=port, forked=True) as served:
            url = served.url
            assert banner == f"{url}/", "the banner names the dashboard's address"

            def running_after_completed() -> bool:
                done = web.get(f"{url}/ticks", params={"status": "completed"}, timeout=10)
                running = web.get(f"{url}/ticks", params={"status": "running"}, timeout=10)
                return bool(done.json()) and bool(running.json())

            wait_until(running_after_completed, "a running tick after a completed one", 120, 0.5)
            browser.get(banner)
            wait = WebDriverWait(browser, DEADLINE_SECONDS)
            scheduler = wait.until(lambda d: seen(d, "#liveness tr.live.r-scheduler"))
            assert str(service.process.pid) in scheduler, scheduler
            tick_id = wait.until(lambda d: seen(d, "#running tr.running", "data-tick"))
            assert tick_id.startswith("busy-")
            first = int(wait.until(lambda d: seen(d, "#running .runtime")).split()[0])
            wait.until(lambda d: int((seen(d, "#running .runtime") or "-1").split()[0]) > first + 1)
            bars = browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar[data-level=busy]")
            assert bars, "the spend chart has a bar for busy"
            wait.until(lambda d: seen(d, "#digest iframe.digest", "srcdoc"))
            assert browser.find_elements(By.CSS_SELECTOR, "#timeline .mark.s-completed")
            axis = browser.find_elements(By.CSS_SELECTOR, "#timeline .axis .tick-label")
            assert len(axis) == 5, "the timeline has a time axis"
            assert "openai-chat: 127.0.0.1 (OPENAI_BASE_URL)" in seen(browser, "#levels")
            assert not seen(browser, "#levels p.fake"), "its ticks go to a configured upstream"
            assert "completed" in seen(browser, "#health tr[data-level=busy] .last")
            assert "failed" in seen(browser, "#health tr[data-level=idle] .last")
            assert browser.find_elements(By.CSS_SELECTOR, "#paused button[data-resume=idle]")
            wait.until(lambda d: seen(d, "#paused .why"))
            assert seen(browser, "#capacity").startswith(
                "capacity: demand 30 slots a minute (1 level(s)); the start spacing (0.25 s) "
                "allows 240 starts a minute; 4 places"
            ), "busy's slots a minute beside the caps, paused idle aside"
            assert not seen(browser, "#over-capacity")
            shot = shots / "dashboard.png"
            assert browser.save_screenshot(str(shot))
            print(f"dashboard screenshot: {shot}")
            wait.until(lambda d: seen(d, "#spend button[data-chart=usd]", click=True))
            wait.until(lambda d: "unpriced models not counted" in seen(d, "#spend"))

            wait.until(lambda d: seen(d, "#paused button[data-resume=idle]", click=True))
            wait.until(lambda d: "none" in seen(d, "#paused"))
            assert not level_paused(store, "idle")
            assert store.read_stream("level-idle")[-1].data["by"] == "http:127.0.0.1"
            wait.until(lambda d: seen(d, "#levels button[data-pause=idle]", click=True))
            wait.until(lambda d: seen(d, "#paused button[data-resume=idle]"))
            assert level_paused(store, "idle"), "paused from the levels table"
            wait.until(lambda d: seen(d, "#levels button[data-resume=idle]", click=True))
            wait.until(lambda d: seen(d, "#levels button[data-pause=idle]"))
            assert not level_paused(store, "idle")
            errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == [], errors

            wait.until(lambda d: seen(d, f"#running a[href='/ui/ticks/{tick_id}']", click=True))
            wait.until(lambda d: seen(d, "#events li.t-ToolCalled"))
            assert "tool shell: ok" in seen(browser, "#events li.t-ToolCalled")
            now = wait.until(lambda d: "call 2 to fake-model in flight" in seen(d, "#now"))
            assert now and "attempt 1: model call 2" in seen(browser, "#now")
            assert "; deadline " in seen(browser, "#now"), "the attempt's deadline"
            assert "live" in seen(browser, "#state"), "the page follows the running tick"
            assert "none yet" in seen(browser, "#result") and not seen(browser, "#result .error")
            shot = shots / "tick-running.png"
            assert browser.save_screenshot(str(shot))
            print(f"running tick page screenshot: {shot}")
            wait.until(lambda d: seen(d, "#cancel", click=True))
            ended = wait.until(lambda d: seen(d, "#events li.live.t-TickCancelled"))
            assert "cancelled by http:127.0.0.1" in ended, "came over the stream"
            wait.until(lambda d: "cancelled" in seen(d, "#summary .why"))
            assert seen(browser, "#now") == "", "an ended tick is nowhere now"
            assert browser.find_elements(By.CSS_SELECTOR, "#log")
            assert store.read_stream(tick_stream(tick_id))[-1].type == "TickCancelled"
            shot = shots / "tick.png"
            assert browser.save_screenshot(str(shot))
            print(f"tick page screenshot: {shot}")

            browser.get(f"{url}/ui/ticks/idle-broken")
            wait.until(lambda d: "configuration" in seen(d, "#summary .why"))
            wait.until(lambda d: seen(d, "#rerun", click=True))
            wait.until(
                lambda d: "/ui/ticks/idle-" in d.current_url and "broken" not in d.current_url
            )
            wait.until(lambda d: seen(d, "#events li.t-TickStarted"))
            again = browser.current_url.rsplit("/", 1)[1]
            assert store.read_stream(tick_stream(again))[0].data["manual"] is True
            wait.until(lambda d: seen(d, "#cancel", click=True))
            wait.until(lambda d: "cancelled" in seen(d, "#summary .why"))

            browser.get(f"{url}/")
            wait.until(lambda d: seen(d, "#levels button[data-run=idle]", click=True))
            wait.until(lambda d: "/ui/ticks/idle-" in d.current_url and again not in d.current_url)
            wait.until(lambda d: seen(d, "#events li.t-TickStarted"))
            manual = browser.current_url.rsplit("/", 1)[1]
            assert store.read_stream(tick_stream(manual))[0].data["manual"] is True
            wait.until(lambda d: seen(d, "#cancel", click=True))
            wait.until(lambda d: "cancelled" in seen(d, "#summary .why"))

            browser.get(f"{url}/ui/ticks?status=cancelled")
            wait.until(lambda d: seen(d, f"#list a[href='/ui/ticks/{manual}']"))
            assert seen(browser, f"#list a[href='/ui/ticks/{tick_id}']")
            headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#list th")]
            assert {"took", "model", "USD"} <= set(headers), headers
            row = "#list tr:has(a[href='/ui/ticks/{}']) .by-hand"
            assert seen(browser, row.format(manual)) == "by hand", "started from the page"
            assert not seen(browser, row.format(tick_id)), "the scheduler's tick"
            shot = shots / "ticks.png"
            assert browser.save_screenshot(str(shot))
            print(f"tick list screenshot: {shot}")
            browser.get(f"{url}/ui/ticks?text=quiet")
            wait.until(lambda d: seen(d, "#list a[href^='/ui/ticks/busy-']"))
            assert not seen(browser, f"#list a[href='/ui/ticks/{manual}']"), "only what says it"
            errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert all("/dashboard/ticks/idle-" in e["message"] for e in errors), errors

            latest = web.get(f"{url}/digests/latest", timeout=10).json()["data"]["path"]
            browser.get(f"file://{latest}")
            assert browser.find_elements(By.CSS_SELECTOR, "table.spend td.n")
            links = "a[href^='https://tickwork.example/ui/ticks/busy-']"
            assert browser.find_elements(By.CSS_SELECTOR, links), "ticks link to their pages"
            shot = shots / "digest.png"
            assert browser.save_screenshot(str(shot))
            print(f"digest screenshot: {shot}")

            output = service.stop()
            browser.get(f"{url}/")
            wait.until(lambda d: "no scheduler running" in seen(d, "#liveness"))
            assert "not firing: no scheduler" in seen(browser, "#levels")
    finally:
        if service.process.poll() is None:
            service.stop()
        fake.stop()
        store.close()
    assert f"{tick_id} cancelled" in output, output
    by_hand = next(line for line in output.splitlines() if f"{manual} cancelled" in line)
    assert "by hand" in by_hand, "a tick started from the page is told in the service's log"


def test_with_a_token_the_page_sends_it_from_the_url_fragment(
    tmp_path: Path, browser: WebDriver
) -> None:
    url = f"sqlite:///{tmp_path}/events.db"
    store = open_store(url)
    with serving(settings_for(url, tmp_path, token=TOKEN), store) as http:
        wait = WebDriverWait(browser, DEADLINE_SECONDS)
        browser.get(f"{http.base_url}/")
        wait.until(lambda d: "HTTP 401" in seen(d, "#state"))
        browser.get("about:blank")  # a fresh load, as an operator opens the link
        browser.get(f"{http.base_url}/#token={TOKEN}")
        wait.until(lambda d: "min" in seen(d, "#levels"))
        assert TOKEN not in browser.current_url, "the token leaves the address bar"
        browser.refresh()
        wait.until(lambda d: "live" in seen(d, "#state"))
    store.close()
