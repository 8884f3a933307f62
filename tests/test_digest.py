"""Digests: built from events and result files, published once, every delivery recorded."""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.config import DigestConfig, LevelConfig, PathsConfig, Settings, StoreConfig
from harness.contracts.events import (
    BudgetSpent,
    DigestClaimed,
    GovernorFired,
    LevelPaused,
    TickCompleted,
    TickEvent,
    TickFailed,
    TickLost,
    TickScheduled,
    TickSkipped,
    TickStarted,
    TickTimedOut,
    level_stream,
)
from harness.contracts.result import TickResult, write_result
from harness.devtools.fake_llm import FakeUpstream
from harness.digests.build import Digest, build_digest
from harness.digests.publish import Period, Publisher, last_period
from harness.digests.render import render
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.store import SqlEventStore, open_store
from tests.commands import COLD, forked, forked_each, start, write_config
from tests.receiver import apprise_receiver
from tests.waiting import wait_until

HOUR = timedelta(hours=1)


def settings_for(tmp_path: Path, store_url: str, **digest: object) -> Settings:
    return Settings(
        store=StoreConfig(url=store_url),
        paths=PathsConfig(
            results=tmp_path / "results", spool=tmp_path / "spool", digests=tmp_path / "digests"
        ),
        levels={
            "min": LevelConfig(every="1m", model="gpt-4o-mini"),
            "hour": LevelConfig(every="1h", model="gpt-4o-mini"),
        },
        digests={"ops": DigestConfig(every="1h", **digest)} if digest else {},  # type: ignore[arg-type]
    )


def record(store: SqlEventStore, *events: TickEvent) -> None:
    for event in events:
        store.append(event.stream_id, [event.to_record()])


def seed_period(store: SqlEventStore, results: Path) -> None:
    """One of each kind of tick an operator must hear about, as real ticks record them."""
    ids = {"tick_id": "", "level": "min"}

    def tick(name: str, level: str = "min") -> dict[str, str]:
        ids.update(tick_id=name, level=level)
        record(store, TickScheduled(**ids), TickStarted(**ids, pid=1, host="h"))
        return dict(ids)

    good = tick("good")
    path = results / "good.json"
    long_text = "All   quiet.\n" + "word " * 200
    write_result(
        path, TickResult(tick_id="good", ok=True, text=long_text, stop_reason="tool_budget")
    )
    record(
        store,
        BudgetSpent(**good, model="gpt-4o-mini", prompt_tokens=1000, completion_tokens=100),
        TickCompleted(**good, result_path=str(path)),
    )
    empty = tick("empty")
    write_result(results / "empty.json", TickResult(tick_id="empty", ok=True, text="  "))
    record(store, TickCompleted(**empty, result_path=str(results / "empty.json")))
    corrupt = tick("corrupt")
    (results / "corrupt.json").write_text("{not json")
    record(store, TickCompleted(**corrupt, result_path=str(results / "corrupt.json")))
    missing = tick("missing")
    record(store, TickCompleted(**missing, result_path=str(results / "gone.json")))
    fired = GovernorFired(
        model="gpt-4o-mini",
        source="worker",
        tick_id="good",
        decision="soft",
        est_tokens=61_000,
        threshold=60_000,
        chars=195_000,
        chars_per_token=3.2,
    )
    store.append(fired.stream_id, [fired.to_record()])
    guessed = tick("guessed", "hour")
    record(
        store,
        BudgetSpent(
            **guessed, model="gpt-4o-mini", prompt_tokens=50, completion_tokens=5, estimated=True
        ),
        TickFailed(**guessed, reason="APIConnectionError: stream cut", failure_class="content"),
    )
    record(store, TickLost(**tick("lost"), reason="claimed, never started"))
    record(store, TickTimedOut(**tick("slow"), timeout_seconds=50))
    skipped = {"tick_id": "over", "level": "min"}
    record(store, TickScheduled(**skipped), TickSkipped(**skipped, reason="budget"))
    store.append(level_stream("hour"), [LevelPaused(level="hour", reason="5xx x4").to_record()])


def digest_of(settings: Settings, store: SqlEventStore, chars: int = 40) -> Digest:
    prices = PriceBook(settings.prices)
    now = datetime.now(UTC)
    return build_digest(
        store,
        projector_for(store, prices),
        prices,
        "ops",
        now - HOUR,
        now + HOUR,
        ["min", "hour"],
        chars,
    )


def test_a_digest_puts_anomalies_first_and_counts_every_kind_of_end(
    tmp_path: Path, store_url: str
) -> None:
    settings = settings_for(tmp_path, store_url)
    (tmp_path / "results").mkdir()
    store = open_store(store_url)
    seed_period(store, tmp_path / "results")
    digest = digest_of(settings, store)
    store.close()

    kinds = {(a.kind, a.tick_id) for a in digest.anomalies}
    assert kinds == {
        ("empty_text", "empty"),
        ("corrupt_result", "corrupt"),
        ("missing_result", "missing"),
        ("estimated_spend", "guessed"),
        ("lost", "lost"),
        ("timed_out", "slow"),
    }
    minute, hour = digest.levels
    assert minute.ticks == {"completed": 4, "lost": 1, "timed_out": 1, "skipped": 1}
    assert minute.skipped == {"budget": 1}
    assert minute.tool_budget_exhausted == 1
    assert (minute.governor_interventions, hour.governor_interventions) == (1, 0)
    assert [e.text for e in minute.excerpts if e.tick_id == "good"] == [
        "All quiet. word word word word word wor…"
    ]
    assert [(s.model, s.calls, s.prompt_tokens) for s in minute.spend] == [("gpt-4o-mini", 1, 1000)]
    assert minute.spend[0].cost_usd == pytest.approx(1000 * 0.15e-6 + 100 * 0.6e-6)
    assert hour.paused and hour.pause_reason == "5xx x4"
    assert hour.failures[0].tick_id == "guessed" and "stream cut" in hour.failures[0].reason


def test_a_digest_counts_every_tick_but_holds_only_the_latest_of_each_kind(
    tmp_path: Path, store_url: str
) -> None:
    """Counts cover the period; failures, excerpts and result files read are the sample's."""
    store = open_store(store_url)
    results = tmp_path / "results"
    results.mkdir()
    at = datetime.now(UTC) - timedelta(minutes=30)
    for n in range(12):
        ids = {"tick_id": f"t{n:02}", "level": "min"}
        slot = at + timedelta(seconds=n)
        record(store, TickScheduled(**ids, occurred_at=slot), TickStarted(**ids, pid=1, host="h"))
        if n % 2:
            record(store, TickFailed(**ids, reason=f"boom {n}", failure_class="content"))
            continue
        path = results / f"t{n:02}.json"
        if n >= 6:  # the unsampled ticks' files are never read: missing, they go unnoticed
            write_result(path, TickResult(tick_id=ids["tick_id"], ok=True, text=f"said {n}"))
        record(store, TickCompleted(**ids, result_path=str(path)))
    prices = PriceBook()
    now = datetime.now(UTC)
    digest = build_digest(
        store, projector_for(store, prices), prices, "ops", now - HOUR, now, ["min"], sample=3
    )
    store.close()
    (minute,) = digest.levels
    assert minute.ticks == {"completed": 6, "failed": 6}
    assert [f.tick_id for f in minute.failures] == ["t07", "t09", "t11"]
    assert [(e.tick_id, e.text) for e in minute.excerpts] == [
        ("t06", "said 6"),
        ("t08", "said 8"),
        ("t10", "said 10"),
    ]
    assert digest.anomalies == []


def test_the_renderings_say_the_same_and_html_is_escaped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/events.db"
    settings = settings_for(tmp_path, url)
    (tmp_path / "results").mkdir()
    store = open_store(url)
    seed_period(store, tmp_path / "results")
    for name in ("html", "same"):  # two ticks that said the same: one quote
        ids = {"tick_id": name, "level": "min"}
        path = tmp_path / f"results/{name}.json"
        write_result(path, TickResult(tick_id=name, ok=True, text="<b>&"))
        record(store, TickScheduled(**ids), TickCompleted(**ids, result_path=str(path)))
    digest = digest_of(settings, store)
    store.close()

    markdown, page = render(digest, "md"), render(digest, "html")
    assert markdown.index("## Anomalies (6)") < markdown.index("## Level min")
    assert "> html, same (2 ticks, same text): <b>&" in markdown
    assert "- lost: lost: claimed, never started" in markdown
    assert "same (2 ticks, same text)</span>: &lt;b&gt;&amp;" in page and "<b>&" not in page
    assert page.count("<ul>") == page.count("</ul>") > 0
    assert page.count("<table") == page.count("</table>") == 3, "anomalies, spend per level"
    assert page.count('<td class="kind">') == 6 and '<p class="paused">PAUSED: 5xx x4' in page
    assert "<style>" in page and "href=" not in page, "no links without [api] public_url"
    linked = render(digest, "html", "https://tw.example/")
    assert '<a href="https://tw.example/ui/ticks/lost" target="_blank">lost</a>' in linked
    assert linked.count('href="https://tw.example/ui/ticks/') == 6 + 1 + 4, (
        "anomalies, failures, quotes"
    )
    assert Digest.model_validate_json(render(digest, "json")) == digest


def test_a_period_is_published_once_and_a_failed_delivery_is_retried_and_recorded(
    tmp_path: Path, store_url: str
) -> None:
    folder = tmp_path / "outbox"
    settings = settings_for(
        tmp_path,
        store_url,
        files=[folder],
        notify=["OPS_HOOK", "UNSET_HOOK"],
        retries=2,
        retry_backoff_seconds=0.05,
    )
    config = settings.digests["ops"]
    store = open_store(store_url)
    prices = PriceBook()
    with apprise_receiver(failures=1) as (url, received):
        env = {"OPS_HOOK": url + "?token=s3cret"}
        publishers = [
            Publisher(settings, store, projector_for(store, prices), prices, print, env)
            for _ in range(2)
        ]
        period = last_period(config, datetime.now(UTC))
        results: list[object] = []
        threads = [
            threading.Thread(target=lambda p=p: results.append(p.publish("ops", config, period)))
            for p in publishers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        bodies = list(received)
    published = [r for r in results if r is not None]
    assert len(published) == 1 and results.count(None) == 1, "two replicas published one period"
    delivery = published[0].delivery  # type: ignore[attr-defined]
    assert delivery[f"file:{folder}"] == "ok" and delivery["env:OPS_HOOK"] == "ok"
    assert delivery["env:UNSET_HOOK"].startswith("failed: environment variable UNSET_HOOK")
    assert len(bodies) == 1 and "tickwork digest ops" in bodies[0]["title"]
    assert len(list(folder.iterdir())) == 1
    stream = store.read_stream("digest-ops")
    store.close()
    types = [e.type for e in stream]
    assert types.count("DigestClaimed") == 1 and types[-1] == "DigestPublished"
    failures = [
        (e.data["target"], e.data["attempt"]) for e in stream if e.type == "DigestDeliveryFailed"
    ]
    assert failures == [("env:OPS_HOOK", 1), ("env:UNSET_HOOK", 1)], "unset: no retry"
    assert "s3cret" not in json.dumps([e.data for e in stream])


def test_a_claim_left_by_a_dead_publisher_is_finished_at_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/events.db"
    folder = tmp_path / "outbox"
    settings = settings_for(tmp_path, url, files=[folder])
    store = open_store(url)
    content = tmp_path / "digests" / "left.md"
    content.parent.mkdir(parents=True)
    content.write_text("# left behind\n")
    now = datetime.now(UTC)
    claim = DigestClaimed(
        name="ops",
        period_start=now - HOUR,
        period_end=now,
        format="md",
        content_hash=hashlib.sha256(content.read_bytes()).hexdigest(),
        path=str(content),
        targets=[f"file:{folder}"],
        host=socket.gethostname(),
        pid=2**22 + 7,  # no such process
    )
    store.append("digest-ops", [claim.to_record()])
    prices = PriceBook()
    publisher = Publisher(settings, store, projector_for(store, prices), prices, print, {})
    publisher.finish_dangling("ops", settings.digests["ops"])
    publisher.finish_dangling("ops", settings.digests["ops"])
    types = [e.type for e in store.read_stream("digest-ops")]
    store.close()
    assert types == ["DigestClaimed", "DigestPublished"]
    assert [p.read_text() for p in folder.iterdir()] == ["# left behind\n"]
    assert publisher.publish("ops", settings.digests["ops"], Period(now - HOUR, now)) is None


def test_the_digest_command_prints_writes_and_refuses_bad_arguments(tmp_path: Path) -> None:
    assert forked(tmp_path, "init").returncode == 0
    store = open_store(f"sqlite:///{tmp_path}/.tickwork/events.db")
    (tmp_path / "results").mkdir()
    seed_period(store, tmp_path / "results")
    store.close()
    refusals = [
        (["--level", "nope"], "unknown level(s) ['nope']"),
        (["--send"], "--send needs --name"),
        (["--name", "nope"], "no digest named 'nope'"),
        (["--since", "1h", "--from", "2026-01-01"], "--since or --from"),
        (["--from", "2026-01-02", "--to", "2026-01-01"], "the period is empty"),
    ]
    printed, written, schema_shown, *refused = forked_each(
        tmp_path,
        [
            ["digest", "--since", "1h", "--format", "json"],
            ["digest", "--level", "min", "--out", str(tmp_path / "d.md")],
            ["digest", "--schema"],
            *(["digest", *args] for args, _ in refusals),
        ],
    )
    assert printed.returncode == 0, printed.stderr
    digest = Digest.model_validate_json(printed.stdout)
    assert {a.kind for a in digest.anomalies} >= {"corrupt_result", "lost"}
    assert written.returncode == 0 and (tmp_path / "d.md").read_text().startswith("# tickwork")
    schema = json.loads(schema_shown.stdout)
    assert schema["properties"]["schema_version"]["const"] == 1
    assert "anomalies" in schema["required"]
    for (args, message), result in zip(refusals, refused, strict=True):
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def published_periods(tmp_path: Path) -> int:
    if not (tmp_path / "events.db").exists():
        return 0
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    count = sum(e.type == "DigestPublished" for e in store.read_stream("digest-ops"))
    store.close()
    return count


def test_two_running_services_publish_each_scheduled_digest_period_once(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox"
    digests = f"""
[levels.quiet]
every = "1h"
model = "fake-model"
[digests.ops]
every = "2s"
files = ["{outbox}"]
"""
    # No tick of theirs comes due within the test: a warm launcher's fork server would
    # spend a second and a half of imports per service for ticks that never start.
    config = write_config(tmp_path, digests, runner=COLD)
    fake = FakeUpstream().start()
    try:
        services = [
            start("run", config, fake, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for _ in range(2)
        ]
        wait_until(
            lambda: published_periods(tmp_path) >= 3, "three digest periods published", 120, 0.5
        )
        for service in services:
            service.send_signal(signal.SIGTERM)
        outputs = [service.communicate(timeout=60)[0] for service in services]
    finally:
        fake.stop()
    assert all(service.returncode == 0 for service in services), outputs
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    stream = store.read_stream("digest-ops")
    store.close()
    claimed = [e.data["period_end"] for e in stream if e.type == "DigestClaimed"]
    published = [e.data["period_end"] for e in stream if e.type == "DigestPublished"]
    assert len(claimed) >= 3 and sorted(set(claimed)) == sorted(claimed), claimed
    assert sorted(published) == sorted(claimed)
    assert len(list(outbox.iterdir())) == len(claimed)
    reported = [line for out in outputs for line in out.splitlines() if "published" in line]
    assert len(reported) == len(claimed), "each period reported once, by its claimant"


def test_the_headline_counts_the_levels_that_ticked_among_those_it_covers(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    for name in ("a", "b"):
        ids = {"tick_id": name, "level": "min"}
        record(
            store, TickScheduled(**ids), TickFailed(**ids, reason="boom", failure_class="content")
        )
    prices = PriceBook()
    now = datetime.now(UTC)
    projector = projector_for(store, prices)

    def headline(levels: list[str]) -> str:
        digest = build_digest(store, projector, prices, "ops", now - HOUR, now + HOUR, levels)
        return render(digest, "md").splitlines()[1]

    assert headline(["min", "hour"]).startswith("2 tick(s) in 1 of 2 level(s); cost")
    assert headline(["min"]).startswith("2 tick(s) in 1 level(s); cost")
    store.close()
