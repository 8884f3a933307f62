"""Operator alerts through apprise: one per episode, from the event log, by one replica.

The alerter follows the log with a checkpoint of its own (`alerts`, in the store beside
the projections' ones): a level tickwork paused, a level over its daily budget, a level's
`consecutive_failures` failed ticks in a row and a lost tick each make one `AlertRaised`
in a stream keyed by the episode. Creating that stream is the claim (of two replicas,
one creates it), so an episode is alerted once, whichever process saw it; the delivery
is recorded after as `AlertDelivered`. A first start folds the log without alerting
it: history is not alerted. Failure streaks are a read model (`failure_streaks`) the
alerter folds in the transaction of its checkpoint, so every replica and a restarted
process go on with the same streak, and its alert is raised by the same tick.

Apprise URLs carry tokens: they come from environment variables the configuration
names (`notify`, default `TICKWORK_ALERT_URLS`), and only those names are recorded.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harness.config import AlertKind, AlertsConfig, Settings, legacy_name, tick_page
from harness.contracts import (
    AlertDelivered,
    AlertRaised,
    BudgetCrossed,
    BudgetProjected,
    LevelBudgetExceeded,
    LevelPaused,
    TickCompleted,
    TickFailed,
    TickLost,
    TickTimedOut,
    alert_stream,
    redact,
)
from harness.projections import Streak, fold_streak, load_streaks, save_streaks
from harness.store import EventData, EventStore, StoreError

log = logging.getLogger(__name__)

CHECKPOINT = "alerts"
POLL_SECONDS = 1.0
WINDOW_EVENTS = 50_000
"""Events of the log (about: `EventStore.reach`) folded per transaction, so per hold of the
checkpoint's lock."""
FAILED = frozenset({TickFailed.type, TickTimedOut.type, TickLost.type})
WATCHED = (
    *FAILED,
    TickCompleted.type,
    LevelPaused.type,
    LevelBudgetExceeded.type,
    BudgetCrossed.type,
    BudgetProjected.type,
)

Sender = Callable[[str, str, str], str]
"""(apprise URL, title, body) -> `ok` or `failed: <why>`."""


@dataclass
class Alerter:
    """Folds the log into alerts and sends them; `run` is a companion of `tickwork run`."""

    settings: Settings
    store: EventStore
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    sender: Sender = field(default=lambda url, title, body: send_apprise(url, title, body))
    folding: bool = False
    """Set after the first poll: from then on a checkpoint of 0 means an empty log, not a
    first start whose history is skipped."""

    def run(self, stopping: threading.Event) -> None:
        """Poll the log until `stopping` is set; a store outage is waited out."""
        while not stopping.is_set():
            try:
                self.poll(stopping)
            except StoreError as exc:
                log.warning("alerts: store unavailable, trying again: %s", exc)
            stopping.wait(POLL_SECONDS)

    def poll(self, stopping: threading.Event | None = None) -> list[AlertRaised]:
        """Fold the events since the checkpoint; claim and send the alerts they open.

        A window per tracking transaction, its alerts claimed once it commits: a long
        backlog (a restart after a long stop) holds the checkpoint's lock, on SQLite every
        writer's, for one window at a time. A service that stops (`stopping`) leaves the
        rest of it, and of a first start's history, to its next start: it waited for
        minutes on a 10M-event log before.
        """
        stopping = stopping or threading.Event()
        if not self.folding:
            if not self._fold_history(stopping):
                return []
            self.folding = True
        sent: list[AlertRaised] = []
        while not stopping.is_set():
            with self.store.tracking(CHECKPOINT) as tracking:
                upper = self.store.reach(tracking.position, tracking.horizon, WINDOW_EVENTS)
                stored = load_streaks(tracking.conn)
                streaks = {level: replace(streak) for level, streak in stored.items()}
                raised = [
                    alert
                    for event in self.store.read_window(tracking, WATCHED, upper)
                    for alert in self._alerts_of(event, streaks)
                ]
                changed = {k: streak for k, streak in streaks.items() if stored.get(k) != streak}
                save_streaks(tracking.conn, changed)
                self.store.save_checkpoint(tracking, upper)
            sent += self._claimed(raised)
            if upper >= tracking.horizon:
                break
        return sent

    def _fold_history(self, stopping: threading.Event) -> bool:
        """A first start (checkpoint at 0): fold the log into the streaks, alerting none of it.

        The history is read without the checkpoint's lock, a window per read transaction,
        and written with the checkpoint only if it still stands at 0 (no replica or earlier
        process folded it meanwhile): on SQLite the lock would keep every writer waiting
        for as long as the history takes to read (over a minute at 10M events, longer
        than a writer waits for it). A kill before the write, or a stop, leaves the first
        start to do again. Returns whether the history is folded.
        """
        with self.store.tracking(CHECKPOINT) as tracking:
            if tracking.position != 0:
                return True
            horizon = tracking.horizon
            streaks = load_streaks(tracking.conn)
        position = 0
        while position < horizon:
            if stopping.is_set():
                return False
            upper = self.store.reach(position, horizon, WINDOW_EVENTS)
            with self.store.reading(CHECKPOINT, position, horizon) as part:
                for event in self.store.read_window(part, WATCHED, upper):
                    self._alerts_of(event, streaks)
            position = upper
        with self.store.tracking(CHECKPOINT) as tracking:
            if tracking.position == 0:
                save_streaks(tracking.conn, streaks)
                self.store.save_checkpoint(tracking, horizon)
        return True

    def _claimed(self, raised: list[AlertRaised]) -> list[AlertRaised]:
        """Claim each episode's first alert and send those this process claimed."""
        if not raised:
            return []
        episodes = {alert.stream_id: alert for alert in reversed(raised)}  # the first of each
        claimed = self.store.create_streams({k: [a.to_record()] for k, a in episodes.items()})
        sent = [alert for alert in raised if episodes[alert.stream_id] is alert]
        sent = [alert for alert in sent if alert.stream_id in claimed]
        for alert in sent:
            self._deliver(alert)
        return sent

    def _alerts_of(self, event: EventData, streaks: dict[str, Streak]) -> list[AlertRaised]:
        _, kind, data = event
        if kind in (BudgetCrossed.type, BudgetProjected.type):
            return self._crossed(kind, data)
        level = data.get("level", "")
        if level not in self.settings.levels:
            return []
        config = self.settings.alerts_for(level)
        streak = streaks.setdefault(level, Streak())
        fold_streak(streak, kind, data)
        if kind == TickCompleted.type:
            return []
        if kind == LevelPaused.type:
            if data.get("by") != "tickwork":
                return []
            tick = streak.last_tick_id
            key = f"paused-{level}-{data['occurred_at']}"
            return self._raise(config, "paused", key, level, data["reason"], tick)
        if kind == LevelBudgetExceeded.type:
            reason = f"daily budget spent on {data['day']}: {data['spent_tokens']:,} tokens"
            key = f"budget-{level}-{data['day']}"
            return self._raise(config, "budget", key, level, reason, None)
        alerts = []
        if kind == TickLost.type:
            reason = f"tick {data['tick_id']} lost: {data['reason']}"
            key = f"lost-{data['tick_id']}"
            alerts += self._raise(config, "lost", key, level, reason, data["tick_id"])
        if streak.failures == config.consecutive_failures:
            last = data.get("reason", kind)
            reason = f"{streak.failures} failed ticks in a row, the last: {last}"
            key = f"failures-{level}-{data['tick_id']}"
            alerts += self._raise(config, "failures", key, level, reason, data["tick_id"])
        return alerts

    def _crossed(self, kind: str, data: Mapping[str, Any]) -> list[AlertRaised]:
        """A budget's soft threshold or limit, passed or on course to be (`BudgetProjected`).

        Once per budget, window, threshold and kind.
        A level's old daily keys keep their one alert a day (`LevelBudgetExceeded`, when
        a slot is skipped): their limit's crossing does not alert twice.
        """
        scope = str(data["scope"])
        level = scope.split(":", 1)[1] if scope.startswith("level:") else ""
        if level and data["budget"] == legacy_name(level) and data["threshold"] >= 1:
            return []
        config = self.settings.alerts_for(level) if level else self.settings.alerts
        used = f"{data['used_tokens']:,} tokens"
        if data.get("used_usd") is not None:
            used += f", USD {data['used_usd']:.4f}"
        what = "limit" if data["threshold"] >= 1 else f"{data['threshold']:.0%}"
        if kind == BudgetProjected.type:
            projected = f"{data['projected_tokens']:,} tokens"
            if data.get("projected_usd") is not None:
                projected += f", USD {data['projected_usd']:.4f}"
            state = (
                f"{what} reached at {data['reaches_at'][:16].replace('T', ' ')} UTC at the "
                f"window's rate so far ({used} spent, {projected} by its end)"
            )
        else:
            state = f"{what} {'reached' if data['threshold'] >= 1 else 'used'} ({used})"
        reason = (
            f"budget {data['budget']} ({scope}): {state}; window ends "
            f"{data['window_end']}; action {data['action']}"
        )
        if data.get("levels"):
            reason += f"; paused {', '.join(data['levels'])}"
        early = "forecast-" if kind == BudgetProjected.type else ""
        key = f"budget-{early}{data['budget']}-{data['window_start']}-{data['threshold']:g}"
        return self._raise(config, "budget", key, level or scope, reason, None)

    def _raise(
        self,
        config: AlertsConfig,
        kind: AlertKind,
        key: str,
        level: str,
        reason: str,
        tick_id: str | None,
    ) -> list[AlertRaised]:
        if kind not in config.on or not config.notify:
            return []
        link = tick_page(self.settings.api.public_url, tick_id) if tick_id else None
        alert = AlertRaised(
            key=re.sub(r"[^A-Za-z0-9_.:+-]", "_", key),
            kind=kind,
            level=level,
            reason=reason,
            tick_id=tick_id,
            link=link,
            targets=[f"env:{name}" for name in config.notify],
        )
        return [alert]

    def _deliver(self, alert: AlertRaised) -> None:
        title = f"tickwork {alert.level}: {alert.kind}"
        body = alert.reason + (f"\n{alert.link}" if alert.link else "")
        delivery = {}
        for target in alert.targets:
            name = target.removeprefix("env:")
            urls = [part for part in re.split(r"[\s,]+", self.env.get(name, "")) if part]
            if not urls:
                delivery[target] = f"failed: environment variable {name} is not set"
                continue
            outcomes = [self.sender(url, title, body) for url in urls]
            failed = [outcome for outcome in outcomes if outcome != "ok"]
            delivery[target] = failed[0] if failed else "ok"
        record = AlertDelivered(key=alert.key, delivery=delivery).to_record()
        self.store.append(alert_stream(alert.key), [record])


def send_apprise(url: str, title: str, body: str) -> str:
    """Send one notification; `ok`, or why not with the URL kept out of the reason."""
    import apprise  # imported on first use: a service without alerts never pays for it

    notifier = apprise.Apprise()
    if not notifier.add(url):
        return "failed: apprise does not accept the URL"
    with apprise.LogCapture(level=apprise.logging.WARNING) as captured:  # type: ignore[no-untyped-call]
        ok = notifier.notify(title=title, body=body)
    if ok:
        return "ok"
    detail = " ".join(captured.getvalue().split())[:300]
    return redact(f"failed: {detail or 'no reason given'}").replace(url, "[url]")
