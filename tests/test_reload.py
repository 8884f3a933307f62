"""Live edits: `tickwork run` and `serve` take tickwork.toml's levels anew on SIGHUP or an edit."""

from __future__ import annotations

import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.api.models import Event, TickDetail
from harness.api.story import page
from harness.cli.show_command import print_story_head
from harness.config import ExecutorConfig, LevelConfig, Settings, StoreConfig, load_settings
from harness.contracts import (
    BudgetSpent,
    ConfigReloaded,
    LevelsRecorded,
    TickScheduled,
    TickSkipped,
    TickStarted,
)
from harness.contracts.events import CONFIG_STREAM, config_stream
from harness.contracts.headlines import headline
from harness.devtools.fake_llm import FakeUpstream
from harness.execution.executors import LocalExecutor
from harness.execution.executors.procrastinate import WorkerExecutor, WorkerRunner
from harness.execution.launchers import WarmLauncher, preloads_of
from harness.execution.launchers.cold import ColdLauncher
from harness.execution.manual import ManualTick
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.prices import PriceBook
from harness.projections.story import tick_story
from harness.scheduling.reload import (
    LevelsReload,
    level_changes,
    levels_record,
    levels_revision,
    recorded_levels,
    reload_lines,
    restart_sections,
)
from harness.scheduling.service import Service
from harness.scheduling.timetable import Timetable
from harness.scheduling.triggers import level_trigger, slot_tick_id
from harness.scheduling.waves import SlotClaim, claim_wave
from harness.store import EventStore, SqlEventStore, StoredEvent, open_store
from tests import web
from tests.commands import (
    COLD,
    ForkedCommand,
    Output,
    environment,
    forked_cli,
    free_port,
    start_service,
)
from tests.tick_support import NAMED_UPSTREAM
from tests.waiting import wait_until

EDIT_OLD = """
[levels.edit]
every = "1h"
prompt = "hold"
model = "fake-model"
timeout_seconds = 30
max_concurrent = 1
overlap = "allow"

[levels.gone]
every = "1h"
prompt = "report"
model = "fake-model"
"""
EDIT_NEW = """
[levels.edit]
every = "1h"
prompt = "report"
model = "fake-model"
timeout_seconds = 40
max_concurrent = 2
overlap = "allow"

[levels.added]
every = "1h"
prompt = "report"
model = "fake-model"
"""


def write(tmp_path: Path, levels: str, extra: str = "", runner: str = "") -> Path:
    """The service's tickwork.toml: no retries, so a stand-in's end is one attempt.

    `extra` goes to its [store] section, `runner` to its [runner] section.
    """
    config = tmp_path / "tickwork.toml"
    config.write_text(
        f"""
[store]
url = "sqlite:///{tmp_path}/events.db"
{extra}
[paths]
results = "{tmp_path}/results"
spool = "{tmp_path}/spool"
[runner]
grace_seconds = 1
shutdown_grace_seconds = 1
infra_retries = 0
content_retries = 0
{runner}
{levels}
"""
    )
    return config


def service_on(
    config: Path, launcher: WarmLauncher | None = None
) -> tuple[Service, LevelsReload, list[str]]:
    """A service wired as `tickwork run` wires it, driven by the test rather than a clock.

    Without `launcher`, its ticks would start cold: the tests that pass none start no
    tick, and the process's shared warm launcher would spawn a fork server (seconds of
    imports) for nothing, and another when a later test asks it to preload more.
    """
    settings = load_settings(config)
    store = open_store(settings.store.url)
    lines: list[str] = []
    executor = LocalExecutor(
        settings,
        Preparer(settings, store, env=NAMED_UPSTREAM),
        Runner(settings, store, launcher or ColdLauncher()),
        lines.append,
    )
    service = Service(settings, store, executor, lines.append)
    reload = service.reload = LevelsReload(service, config, lines.append, [executor.levels_changed])
    return service, reload, lines


def scheduled(store: EventStore, tick_id: str) -> dict[str, Any]:
    return store.read_stream(f"tick-{tick_id}")[0].data


def started(store: EventStore, tick_id: str) -> StoredEvent | None:
    events = store.read_stream(f"tick-{tick_id}")
    return next((e for e in events if e.type == TickStarted.type), None)


def release(store: EventStore, tick_id: str) -> None:
    """Let a stand-in tick that holds (prompt `hold`) end, once it has started."""
    start = wait_until(lambda: started(store, tick_id), f"{tick_id} to start")
    Path(start.data["result_path"]).with_suffix(".go").touch()


def test_level_changes_name_each_level_added_removed_and_changed() -> None:
    def level(**fields: Any) -> LevelConfig:
        return LevelConfig(every="1m", model="m", **fields)

    old = {"a": level(), "b": level(), "c": level(prompt="x")}
    new = {"a": level(), "c": level(prompt="y"), "d": level()}
    changes = level_changes(old, new)
    assert (changes.added, changes.removed, changes.changed) == (("d",), ("b",), ("c",))
    assert changes.describe() == "added d; removed b; changed c"
    assert not level_changes(old, dict(old))
    assert levels_revision(old) == levels_revision(dict(reversed(old.items())))
    assert levels_revision(old) != levels_revision({**old, "c": level(prompt="z")})


def test_a_retimed_timetable_keeps_a_slot_already_due_and_drops_removed_jobs() -> None:
    def trigger(every: str) -> Any:
        return level_trigger(LevelConfig(every=every, model="m"))

    start = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    timetable = Timetable(
        {"kept": trigger("1m"), "edited": trigger("1m"), "gone": trigger("1m")}, start
    )
    now = start + timedelta(seconds=0.5)  # 12:00 is due and not yet fired
    timetable.retime(
        {"kept": trigger("1m"), "edited": trigger("1h"), "new": trigger("1m")}, {"edited"}, now
    )
    assert timetable.upcoming == {
        "kept": start,
        "edited": start,  # on the hour: the new schedule's slot still due
        "new": start + timedelta(minutes=1),  # an added level fires from its next slot
    }
    timetable.retime(timetable.triggers, {"kept"}, now)
    assert timetable.upcoming["kept"] == start, "an unchanged schedule keeps the slot it had"


def test_a_reload_adds_removes_and_changes_levels_while_a_tick_of_a_changed_one_runs(
    tmp_path: Path, standin_launcher: WarmLauncher, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, EDIT_OLD)
    service, reload, lines = service_on(config, standin_launcher)
    store, old = service.store, service.config_revision
    first = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    running, queued, after = (slot_tick_id("edit", first + timedelta(hours=h)) for h in range(3))
    try:
        service.fire([(first, "edit")])
        wait_until(lambda: started(store, running), "the first tick to run")
        service.fire([(first + timedelta(hours=1), "edit")])  # queued behind it (cap 1)
        config.write_text(write(tmp_path, EDIT_NEW).read_text())
        assert reload.reload(), lines
        new = service.config_revision
        assert new == levels_revision(load_settings(config).levels) != old
        service.fire([(first + timedelta(hours=2), "edit"), (first, "added")])
        # The new cap of 2 holds at once: the queued tick starts beside the running one,
        # and holds, as the prompt it was claimed with says.
        release(store, queued)
        release(store, running)
        service.wait_idle(60)
    finally:
        service.shutdown()
    revisions = {t: scheduled(store, t)["config_revision"] for t in (running, queued, after)}
    assert revisions == {running: old, queued: old, after: new}
    timeouts = {t: started(store, t).data["timeout_seconds"] for t in (running, queued, after)}  # type: ignore[union-attr]
    assert timeouts == {running: 30, queued: 30, after: 40}
    added = slot_tick_id("added", first)
    assert scheduled(store, added)["config_revision"] == new and started(store, added)
    [reloaded] = store.read_stream(CONFIG_STREAM)
    assert reloaded.type == ConfigReloaded.type
    assert reloaded.data["previous_revision"] == old and reloaded.data["revision"] == new
    assert (reloaded.data["added"], reloaded.data["removed"], reloaded.data["changed"]) == (
        ["added"],
        ["gone"],
        ["edit"],
    )
    assert set(service.settings.levels) == {"edit", "added"}
    assert preloads_of(service.settings) <= standin_launcher.preloads, "the new levels' needs"
    assert (
        f"levels revision {old[:12]} -> {new[:12]} (added added; removed gone; changed edit)"
        in "\n".join(lines)
    )
    story = tick_story(store, queued)
    assert story is not None and story.config_revision == old
    print_story_head(story)
    assert f"config  levels revision {old[:12]}" in capsys.readouterr().out
    events = [Event.of(e) for e in store.read_stream(f"tick-{queued}")]
    detail = TickDetail(tick=None, events=events, result=None, result_error=None)
    shown = page(detail, queued, PriceBook())
    assert f"<th>levels revision</th><td>{old[:12]}</td>" in shown
    reload.poll()  # stores the levels of the revision in force
    stored = recorded_levels(store, new)
    assert stored is not None and stored["edit"].timeout_seconds == 40
    assert store.read_stream(config_stream(new))[0].type == LevelsRecorded.type


@pytest.mark.parametrize(
    ("levels", "error"),
    [
        (
            EDIT_OLD.replace('every = "1h"', 'every = "soon"', 1),
            "levels.edit.every: 'soon' is not an interval",
        ),
        (EDIT_OLD + '\n[levels.nomodel]\nevery = "1m"\n', "levels.nomodel.model is not set"),
        (
            EDIT_OLD.replace("[levels.gone]", "[levels.gone]\nbogus = 1"),
            "unknown key 'bogus' in [levels.gone]",
        ),
        (EDIT_OLD + "\n[levels.x\n", "invalid TOML"),
    ],
    ids=["bad-value", "no-model", "unknown-key", "not-toml"],
)
def test_an_invalid_reload_keeps_the_old_levels_and_changes_no_stored_data(
    tmp_path: Path, levels: str, error: str
) -> None:
    config = write(tmp_path, EDIT_OLD)
    service, reload, lines = service_on(config)
    reload.poll()  # the levels in force are stored
    before = service.store.read_all(0, 1000)
    in_force, revision = dict(service.settings.levels), service.config_revision
    config.write_text(write(tmp_path, levels).read_text())
    reload.request()
    reload.poll()
    assert service.store.read_all(0, 1000) == before
    assert service.settings.levels == in_force and service.config_revision == revision
    assert set(service.triggers) == set(in_force)
    [line] = [line for line in lines if "rejected" in line]
    assert line.startswith(f"{config} rejected (")
    kept = f"levels revision {revision[:12]} stays in force"
    assert line.endswith(f"): {kept} (an edit or SIGHUP reads the file again)"), line
    assert "\n" not in line, "one line in the log"
    assert str(config) in line and error in line, line
    service.store.close()


def test_a_changed_section_besides_levels_waits_for_a_restart(tmp_path: Path) -> None:
    config = write(tmp_path, EDIT_OLD)
    service, reload, lines = service_on(config)
    durable = write(tmp_path, EDIT_NEW, extra='durability = "power"')
    assert restart_sections(service.settings, load_settings(durable)) == ["store"]
    assert reload.reload()
    assert service.settings.store.durability == "process", "the running store stays"
    assert set(service.settings.levels) == {"edit", "added"}, "the levels reload all the same"
    assert any("[store] changed: they take effect at the next restart" in line for line in lines)
    [reloaded] = service.store.read_stream(CONFIG_STREAM)
    assert reloaded.data["restart"] == ["store"]
    by_hand = ManualTick(
        service.settings, service.store, env=NAMED_UPSTREAM, router=None, reason="-"
    )
    claim = by_hand.claim("added")
    new_revision = scheduled(service.store, claim.tick_id)["config_revision"]
    assert new_revision == reloaded.data["revision"], "a tick by hand names its revision too"
    assert recorded_levels(service.store, new_revision) == service.settings.levels
    assert headline(reloaded.type, reloaded.data).endswith(
        "; added added; removed gone; changed edit; restart store"
    )
    old, new = reloaded.data["previous_revision"], reloaded.data["revision"]
    rows = reload_lines(load_settings(config), service.store)
    assert rows[0] == ("levels", f"revision {new[:12]} (this file)")
    assert rows[2:] == [
        ("", f"{old[:12]} -> {new[:12]}"),
        ("", "added added; removed gone; changed edit"),
    ]
    edited = reload_lines(load_settings(write(tmp_path, EDIT_OLD)), service.store)
    assert edited[-1] == ("", "this file's levels differ: SIGHUP reloads them")
    service.store.close()


BUDGETED = """
[levels.{name}]
every = "1s"
prompt = "Anything new?"
model = "fake-model"
reserve_tokens = 1
"""
"""A level whose every slot is claimed and skipped (under `SPENT`, spent by `spent_already`):
it fires every second without starting a tick process."""
SPENT = """
[[budgets]]
name = "spent"
scope = "global"
window = "24h"
tokens = 1
"""


def spent_already(store: EventStore) -> None:
    """The one token of the `SPENT` budget, spent by an earlier tick."""
    spent = BudgetSpent(
        tick_id="earlier", level="old", model="fake-model", prompt_tokens=1, completion_tokens=0
    )
    store.append(spent.stream_id, [spent.to_record()])


def test_sighup_or_an_edit_reloads_a_running_service_and_an_invalid_file_is_refused(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    # Every slot is skipped for the spent budget: no tick process starts, so the cold
    # launcher spares the service a fork server warming up for nothing.
    config = write(tmp_path, BUDGETED.format(name="old") + SPENT, runner=COLD)
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    spent_already(store)
    service = Output(start_service(config, fake))

    def claims(level: str) -> list[StoredEvent]:
        return [
            e for e in store.read_all(0, 100_000, [TickScheduled.type]) if e.data["level"] == level
        ]

    def skips(level: str) -> list[StoredEvent]:
        return [
            e
            for e in store.read_all(0, 100_000, [TickSkipped.type, TickStarted.type])
            if e.data["level"] == level
        ]

    try:
        wait_until(lambda: claims("old"), "a slot of the old level")
        config.write_text(config.read_text().replace("[levels.old]", "[levels.new]"))
        service.process.send_signal(signal.SIGHUP)
        [reloaded] = wait_until(lambda: store.read_stream(CONFIG_STREAM), "the reload")
        wait_until(lambda: claims("new"), "a slot of the added level")
        valid = config.read_text()
        config.with_name("valid.toml").write_text(valid)
        config.write_text(valid.replace('every = "1s"', 'every = "never"'))
        service.process.send_signal(signal.SIGHUP)
        service.wait_for(f"{config} rejected (")
        seen = len(claims("new"))
        wait_until(lambda: len(claims("new")) > seen, "the levels in force to go on firing")
        assert len(store.read_stream(CONFIG_STREAM)) == 1, "a refused file is no reload"
        config.write_text(valid + BUDGETED.format(name="more"))  # an edit alone, no signal
        edited = wait_until(lambda: store.read_stream(CONFIG_STREAM)[1:], "the edit's reload")
        wait_until(lambda: claims("more"), "a slot of the level the edit added")
        # The global budget holds the added level at once: its slots are skipped `budget`.
        skipped = wait_until(lambda: skips("more"), "a slot of the added level skipped")
    finally:
        output = service.stop()
    assert service.process.returncode == 0, output
    assert (reloaded.data["added"], reloaded.data["removed"]) == (["new"], ["old"])
    reload_at = datetime.fromisoformat(reloaded.data["occurred_at"])
    assert all(datetime.fromisoformat(e.data["slot"]) <= reload_at for e in claims("old"))
    first, second = reloaded.data["revision"], edited[0].data["revision"]
    assert {e.data["config_revision"] for e in claims("new")} <= {first, second}
    assert {e.data["config_revision"] for e in claims("more")} == {second}
    assert edited[0].data["added"] == ["more"] and edited[0].data["previous_revision"] == first
    assert "levels.new.every: 'never' is not an interval" in output
    assert (skipped[0].type, skipped[0].data.get("reason")) == (TickSkipped.type, "budget")
    status = forked_cli("status", config.with_name("valid.toml"), fake)
    assert status.returncode == 0, status.stderr
    shown = " ".join(status.stdout.split())
    assert f"levels revision {first[:12]} (this file)" in shown, shown
    assert f"{first[:12]} -> {second[:12]} added more" in shown, shown
    assert "this file's levels differ: SIGHUP reloads them" in shown, shown
    store.close()


def test_serve_takes_an_edit_or_sighup_of_the_levels_as_run_does(tmp_path: Path) -> None:
    """The API and the dashboard's levels follow the file; an invalid one is refused."""
    config = write(tmp_path, EDIT_OLD, f"[api]\nport = {free_port()}")
    port = load_settings(config).api.port
    env = environment(TICKWORK_CONFIG=str(config))
    piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    server = Output(ForkedCommand(tmp_path, ["serve", "--port", str(port)], env, **piped))
    url = f"http://127.0.0.1:{port}"

    def levels() -> list[str]:
        try:
            return sorted(level["name"] for level in web.get(f"{url}/levels").json())
        except httpx.TransportError:
            return []

    try:
        assert wait_until(levels, "serve to answer") == ["edit", "gone"]
        config.write_text(config.read_text().replace(EDIT_OLD, EDIT_NEW))  # an edit alone
        line = server.wait_for(f"{config} reloaded: levels revision ")
        assert line.rstrip().endswith("(added added; removed gone; changed edit)"), line
        assert levels() == ["added", "edit"]
        assert "added" in web.get(f"{url}/dashboard/panels").text
        valid = config.read_text()
        config.write_text(valid.replace('every = "1h"', 'every = "never"', 1))
        server.process.send_signal(signal.SIGHUP)
        server.wait_for(f"{config} rejected (")
        assert levels() == ["added", "edit"], "a refused file changes nothing"
        config.write_text(valid + EDIT_OLD.split("[levels.gone]")[1].join(["[levels.gone]", ""]))
        server.process.send_signal(signal.SIGHUP)
        server.wait_for("(added gone)")
        assert levels() == ["added", "edit", "gone"]
    finally:
        server.stop()


@pytest.mark.postgres
def test_a_procrastinate_worker_runs_a_tick_with_the_levels_its_slot_was_claimed_under(
    pg_store: SqlEventStore, pg_session_url: str
) -> None:
    """The worker's own file may lag the scheduler's reload: the claim's revision wins."""
    store = pg_store
    own = {"edit": LevelConfig(every="1h", model="m", timeout_seconds=30)}
    worker_settings = Settings(
        store=StoreConfig(url=pg_session_url),
        executor=ExecutorConfig(kind="procrastinate"),
        levels=own,
    )
    reloaded = {**own, "edit": own["edit"].model_copy(update={"timeout_seconds": 45})}
    reloaded["added"] = LevelConfig(every="1m", model="m2", prompt="new")
    revision = levels_revision(reloaded)
    record = levels_record(reloaded, revision)
    store.create_streams({record.stream_id: [record.to_record()]})
    at = datetime(2026, 1, 1, tzinfo=UTC)
    claims = [
        SlotClaim("edit-1", "edit", at, config_revision=revision),
        SlotClaim("added-1", "added", at, config_revision=revision),
        SlotClaim("edit-2", "edit", at),  # by hand, or by an older scheduler
        SlotClaim("edit-3", "edit", at, config_revision="0" * 64),  # not stored
    ]
    claim_wave(store, worker_settings, claims)
    reports: list[str] = []
    runner = WorkerRunner(worker_settings, store, ColdLauncher())
    worker = WorkerExecutor(worker_settings, store, None, runner, reports.append)  # type: ignore[arg-type]
    assert worker.claimed_config("edit-1", "edit") == (revision, reloaded["edit"])
    assert worker.claimed_config("added-1", "added") == (revision, reloaded["added"])
    assert worker.claimed_config("edit-2", "edit") == (None, None)
    assert worker.claimed_config("edit-3", "edit") == ("0" * 64, None)
    assert any("not stored: own settings" in line for line in reports)
    tick = Preparer(worker_settings, store, env=NAMED_UPSTREAM).prepare(
        "added", tick_id="added-1", slot=at, config=reloaded["added"]
    )
    assert (tick.payload.model, tick.payload.prompt, tick.timeout) == ("m2", "new", 300)
