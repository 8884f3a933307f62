"""Alerts: one per episode to the operator's apprise targets, from the event log."""

from __future__ import annotations

import threading
from pathlib import Path
from uuid import uuid4

import pytest

from harness.config import AlertsConfig, ApiConfig, ConfigError, load_settings
from harness.contracts.events import LevelBudgetExceeded, TickCompleted, TickLost
from harness.contracts.secrets import secret_names
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.scheduling.alerts import CHECKPOINT, Alerter
from harness.store import SqlEventStore
from tests.receiver import Received
from tests.tick_support import Harness


def test_an_automatic_pause_sends_exactly_one_alert_with_its_reason_and_tick_link(
    tmp_path: Path, fake: FakeUpstream, receiver: tuple[str, Received]
) -> None:
    url, received = receiver
    harness = Harness(tmp_path, fake, rag=False)
    settings = harness.settings.model_copy(
        update={"api": ApiConfig(public_url="https://tickwork.example/")}
    )
    alerter = Alerter(settings, harness.store, env={"TICKWORK_ALERT_URLS": url})
    assert alerter.poll() == [], "a first start alerts no history"

    outcome = harness.tick([Step(status=401, error_message="bad key")])
    assert outcome.status == "failed"
    assert harness.store.read_stream("level-min")[-1].type == "LevelPaused"
    (alert,) = alerter.poll()
    assert (alert.kind, alert.level, alert.tick_id) == ("paused", "min", outcome.tick_id)
    assert alerter.poll() == [] and len(received) == 1
    assert received[0]["title"] == "tickwork min: paused"
    page = f"https://tickwork.example/ui/ticks/{outcome.tick_id}"
    assert alert.link == page and page in received[0]["message"], "the tick's page, not its JSON"
    assert "API key" in received[0]["message"], received[0]
    delivered = harness.store.read_stream(alert.stream_id)
    assert [e.type for e in delivered] == ["AlertRaised", "AlertDelivered"]
    assert delivered[1].data["delivery"] == {"env:TICKWORK_ALERT_URLS": "ok"}
    assert url not in str(delivered[0].data) + str(delivered[1].data)


def test_lost_ticks_failure_streaks_and_budgets_are_alerted_once_per_episode(
    tmp_path: Path, fake: FakeUpstream, receiver: tuple[str, Received]
) -> None:
    url, received = receiver
    harness = Harness(tmp_path, fake, rag=False)
    own = AlertsConfig(on=["failures", "budget"], consecutive_failures=2)
    levels = {"min": harness.settings.levels["min"].model_copy(update={"alerts": own})}
    settings = harness.settings.model_copy(update={"levels": levels})
    alerter = Alerter(settings, harness.store, env={"TICKWORK_ALERT_URLS": url})
    alerter.poll()
    store = harness.store

    def lost(tick_id: str) -> None:
        store.append(
            f"tick-{tick_id}", [TickLost(tick_id=tick_id, level="min", reason="gone").to_record()]
        )

    lost("t1")
    store.append("tick-t2", [TickCompleted(tick_id="t2", level="min").to_record()])
    lost("t3")
    lost("t4")
    lost("t5")
    spent = LevelBudgetExceeded(
        level="min", day="2026-11-30", spent_tokens=5, spent_usd=None, reserved_tokens=0
    )
    again = spent.model_copy(update={"event_id": uuid4()})  # as another replica records it
    store.append("level-min", [spent.to_record(), again.to_record()])
    kinds = [(a.kind, a.tick_id) for a in alerter.poll()]
    assert kinds == [("failures", "t4"), ("budget", None)], "lost is off for this level"
    assert len(received) == 2


def test_a_failure_streak_outlives_a_restart_and_is_shared_by_replicas(
    tmp_path: Path, fake: FakeUpstream, receiver: tuple[str, Received], store: SqlEventStore
) -> None:
    url, received = receiver
    harness = Harness(tmp_path, fake, rag=False)
    own = AlertsConfig(on=["failures"], consecutive_failures=3)
    levels = {"min": harness.settings.levels["min"].model_copy(update={"alerts": own})}
    settings = harness.settings.model_copy(update={"levels": levels})

    def replica() -> Alerter:
        return Alerter(settings, store, env={"TICKWORK_ALERT_URLS": url})

    def lost(tick_id: str) -> None:
        event = TickLost(tick_id=tick_id, level="min", reason="gone")
        store.append(f"tick-{tick_id}", [event.to_record()])

    lost("t0")
    first, second = replica(), replica()
    assert first.poll() == [], "history is folded, not alerted"
    lost("t1")
    assert second.poll() == [], "two failed in a row, history included"
    lost("t2")
    (alert,) = replica().poll()  # a restarted process goes on with the stored streak
    assert (alert.kind, alert.tick_id) == ("failures", "t2")
    lost("t3")
    assert first.poll() == [] and second.poll() == [], "one alert per episode"
    store.append("tick-t4", [TickCompleted(tick_id="t4", level="min").to_record()])
    for tick_id in ("t5", "t6"):
        lost(tick_id)
    assert second.poll() == []
    lost("t7")
    assert [a.tick_id for a in first.poll()] == ["t7"], "a new episode after a completed tick"
    assert len(received) == 2


def test_a_stopping_service_leaves_a_first_starts_history_to_its_next_start(
    tmp_path: Path, fake: FakeUpstream, store: SqlEventStore
) -> None:
    """A first start folds the whole log: at 10M events, minutes a service's stop waited for."""
    harness = Harness(tmp_path, fake, rag=False)
    store.append("tick-t0", [TickLost(tick_id="t0", level="min", reason="gone").to_record()])
    stopping = threading.Event()
    stopping.set()
    alerter = Alerter(harness.settings, store)
    assert alerter.poll(stopping) == []
    assert store.checkpoints([CHECKPOINT]) == {CHECKPOINT: 0}, "nothing folded, nothing skipped"
    assert alerter.poll() == [], "the next start folds the history, alerting none of it"
    assert store.checkpoints([CHECKPOINT])[CHECKPOINT] > 0


def test_an_alert_target_must_be_an_environment_variable_not_a_url(tmp_path: Path) -> None:
    config = tmp_path / "tickwork.toml"
    config.write_text('[alerts]\nnotify = ["json://hooks.example/secret"]\n')
    with pytest.raises(ConfigError, match=r"alerts\.notify.*not a URL itself"):
        load_settings(config)
    config.write_text(
        '[levels.min]\nevery = "1m"\nmodel = "m"\n[levels.min.alerts]\nnotify = ["OPS_PAGER"]\n'
    )
    settings = load_settings(config)
    assert settings.alerts_for("min").notify == ["OPS_PAGER"]
    assert settings.alerts.notify == ["TICKWORK_ALERT_URLS"]
    assert "OPS_PAGER" in secret_names()
