"""Publishing digests: each period once, across restarts and replicas, every delivery recorded.

A period is claimed in the digest's own stream (`digest-<name>`) by appending
`DigestClaimed` at the version this process read: of two replicas one wins, the other
finds the claim when it re-reads and publishes nothing. The claimant renders the digest to
`paths.digests`, delivers it to each target with retries (every failed attempt a
`DigestDeliveryFailed` event) and ends the period with `DigestPublished`, which says per
target whether it arrived. A claimant that died before that end leaves a dangling claim
the next start-up finishes from the stored file, so no period is silently dropped.

Targets are folders (`file:<folder>`) and apprise URLs named by the environment variable
holding them (`env:<NAME>`): the URLs carry tokens and never reach an event or a log.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import apprise
import psutil
from tenacity import (
    Retrying,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from harness.config import DigestConfig, Settings, parse_interval
from harness.contracts import (
    DigestClaimed,
    DigestDeliveryFailed,
    DigestPublished,
    Event,
    RawEvent,
    decode,
    digest_stream,
)
from harness.digests.build import build_digest
from harness.digests.render import DigestFormat, period_title, render
from harness.files import write_atomically
from harness.prices import PriceBook
from harness.projections import Projector
from harness.scheduling import (
    Budgets,
    BudgetStatus,
    Slot,
    Timetable,
    budget_statuses,
    level_trigger,
    next_slot,
)
from harness.store import NO_STREAM, ConcurrencyError, EventStore, StoreError

Report = Callable[[str], None]
T = TypeVar("T")
RECENT = 200
"""Events of a digest stream read back to find a period's claim (periods come in order)."""
FOREIGN_CLAIM_STALE = timedelta(minutes=30)
"""A claim by a process on another host is finished by us only after this long."""
APPRISE_FORMATS = {
    "md": apprise.NotifyFormat.MARKDOWN,
    "html": apprise.NotifyFormat.HTML,
    "json": apprise.NotifyFormat.TEXT,
}


class DeliveryError(Exception):
    """One target could not take the digest; the message is safe to record (no secrets)."""


class TargetMisconfigured(DeliveryError):
    """Retrying cannot help (an unset variable, a URL apprise does not know)."""


@dataclass(frozen=True)
class Period:
    """The span a digest covers, ending at its slot."""

    start: datetime
    end: datetime

    @property
    def stamp(self) -> str:
        """The period's end as a compact UTC stamp, to name the digest's files."""
        return f"{self.end.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def targets_of(config: DigestConfig) -> list[str]:
    """The targets of a digest as its events name them (folders by path, notifiers by env name)."""
    return [f"file:{folder}" for folder in config.files] + [f"env:{n}" for n in config.notify]


def last_period(config: DigestConfig, now: datetime) -> Period:
    """The period of the digest's latest slot at or before `now`."""
    trigger = level_trigger(config)
    slot = next_slot(trigger, None, now - _gap(config, now) - timedelta(seconds=1))
    while (following := next_slot(trigger, slot, slot)) <= now:
        slot = following
    return period_ending(config, slot)


def period_ending(config: DigestConfig, slot: datetime) -> Period:
    """The configured period up to the slot, else the time since the slot before it."""
    if config.period is not None:
        return Period(slot - timedelta(seconds=parse_interval(config.period)), slot)
    return Period(slot - _gap(config, slot), slot)


def _gap(config: DigestConfig, at: datetime) -> timedelta:
    trigger = level_trigger(config)
    first = next_slot(trigger, None, at)
    return next_slot(trigger, first, first) - first


class Publisher:
    """Builds, claims and delivers one digest period, so each goes out once across replicas."""

    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        projector: Projector,
        prices: PriceBook,
        report: Report,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.projector = projector
        self.prices = prices
        self.report = report
        self.env = dict(os.environ if env is None else env)
        self._budget_model: Budgets | None = None

    def _budgets(self) -> list[BudgetStatus]:
        """Every budget's window now, for the digest's table (none configured: empty)."""
        if self._budget_model is None:
            self._budget_model = Budgets(self.store, self.projector, self.prices, self.settings)
        return budget_statuses(self._budget_model)

    def publish(self, name: str, config: DigestConfig, period: Period) -> DigestPublished | None:
        """Claim, build, deliver and record one period; None when it was claimed already."""
        stream = digest_stream(name)
        rendered: str | None = None
        while True:
            version, recent = self._recent(stream)
            claimed = next(
                (e for e in recent if isinstance(e, DigestClaimed) and e.period_end == period.end),
                None,
            )
            if claimed is not None:
                if rendered is not None and rendered != claimed.path:
                    Path(rendered).unlink(missing_ok=True)  # lost the race: keep no stray copy
                return None
            claim = self._render(name, config, period)
            rendered = claim.path
            try:
                self.store.append(stream, [claim.to_record()], version or NO_STREAM)
            except ConcurrencyError:
                continue  # another replica appended: look again for this period's claim
            return self._deliver(claim, config)

    def finish_dangling(self, name: str, config: DigestConfig) -> None:
        """Deliver the periods a dead claimant left unpublished (at start-up)."""
        claims: dict[datetime, DigestClaimed] = {}
        for event in self._recent(digest_stream(name))[1]:
            if isinstance(event, DigestClaimed):
                claims[event.period_end] = event
            elif isinstance(event, DigestPublished):
                claims.pop(event.period_end, None)
        for claim in claims.values():
            if self._claimant_alive(claim):
                continue
            self.report(f"digest {name} {claim.period_end:%Y-%m-%d %H:%M}: finishing its delivery")
            self._deliver(claim, config)

    def _recent(self, stream: str) -> tuple[int, list[Event | RawEvent]]:
        """The stream's version and its last RECENT events (periods are claimed in order)."""
        version = self.store.stream_version(stream)
        tail = self.store.read_stream(stream, after=max(0, version - RECENT))
        return version, [decode(stored) for stored in tail]

    def _render(self, name: str, config: DigestConfig, period: Period) -> DigestClaimed:
        levels = config.levels or list(self.settings.levels)
        digest = build_digest(
            self.store,
            self.projector,
            self.prices,
            name,
            period.start,
            period.end,
            levels,
            config.excerpt_chars,
        )
        digest = digest.model_copy(update={"budgets": self._budgets()})
        content = render(digest, config.format, self.settings.api.public_url).encode()
        content_hash = hashlib.sha256(content).hexdigest()
        # Named by its content: a replica that loses the claim never overwrites the winner's.
        file_name = f"{period.stamp}-{content_hash[:12]}.{config.format}"
        path = (self.settings.paths.digests / name / file_name).absolute()
        write_atomically(path, content)
        return DigestClaimed(
            name=name,
            period_start=period.start,
            period_end=period.end,
            format=config.format,
            content_hash=content_hash,
            path=str(path),
            targets=targets_of(config),
            host=socket.gethostname(),
            pid=os.getpid(),
        )

    def _deliver(self, claim: DigestClaimed, config: DigestConfig) -> DigestPublished:
        delivery = {}
        for target in claim.targets:
            try:
                self._with_retries(claim, target, config)
                delivery[target] = "ok"
            except DeliveryError as exc:
                delivery[target] = f"failed: {exc}"
                self.report(f"digest {claim.name} not delivered to {target}: {exc}")
        published = DigestPublished(
            name=claim.name,
            period_start=claim.period_start,
            period_end=claim.period_end,
            format=claim.format,
            content_hash=claim.content_hash,
            path=claim.path,
            targets=claim.targets,
            delivery=delivery,
        )
        self.store.append(published.stream_id, [published.to_record()])
        return published

    def _with_retries(self, claim: DigestClaimed, target: str, config: DigestConfig) -> None:
        """Deliver to one target; every failed attempt is recorded, retried or not."""
        attempts = Retrying(
            retry=retry_if_not_exception_type(TargetMisconfigured),
            stop=stop_after_attempt(config.retries + 1),
            wait=wait_exponential(multiplier=config.retry_backoff_seconds, max=60),
            reraise=True,
        )
        for attempt in attempts:
            with attempt:
                try:
                    self._send(claim, target)
                except DeliveryError as exc:
                    failed = DigestDeliveryFailed(
                        name=claim.name,
                        period_start=claim.period_start,
                        period_end=claim.period_end,
                        target=target,
                        attempt=attempt.retry_state.attempt_number,
                        error=str(exc),
                    )
                    self.store.append(failed.stream_id, [failed.to_record()])
                    raise

    def _send(self, claim: DigestClaimed, target: str) -> None:
        try:
            content = Path(claim.path).read_bytes()
        except OSError as exc:
            raise DeliveryError(f"digest file {claim.path}: {exc.strerror}") from exc
        if hashlib.sha256(content).hexdigest() != claim.content_hash:
            raise DeliveryError(f"digest file {claim.path} changed since it was claimed")
        kind, _, where = target.partition(":")
        if kind == "file":
            name = f"{claim.name}-{Path(claim.path).name}"
            try:
                write_atomically(Path(where) / name, content, mode=0o640)
            except OSError as exc:
                raise DeliveryError(f"cannot write into {where}: {exc.strerror}") from exc
            return
        url = self.env.get(where)
        if not url:
            raise TargetMisconfigured(f"environment variable {where} (an apprise URL) is not set")
        _notify(url, claim, content.decode())

    def _claimant_alive(self, claim: DigestClaimed) -> bool:
        if claim.host == socket.gethostname():
            return claim.pid != os.getpid() and psutil.pid_exists(claim.pid)
        return datetime.now(UTC) - claim.occurred_at < FOREIGN_CLAIM_STALE


def _notify(url: str, claim: DigestClaimed, body: str) -> None:
    """Send through apprise; its log lines become the error, with the URL scrubbed."""
    notifier = apprise.Apprise()
    if not notifier.add(url):
        raise TargetMisconfigured("apprise does not accept the URL in that variable")
    fmt: DigestFormat = claim.format
    subject = period_title(claim.name, claim.period_start, claim.period_end)
    with apprise.LogCapture(level=apprise.logging.WARNING) as log:  # type: ignore[no-untyped-call]
        sent = notifier.notify(body=body, title=subject, body_format=APPRISE_FORMATS[fmt])
        messages = log.getvalue()
    if not sent:
        detail = " ".join(messages.replace(url, "<url>").split())[-300:]
        raise DeliveryError(f"apprise could not deliver: {detail or 'no reason given'}")


class DigestScheduler:
    """Publishes every configured digest on its schedule, in a thread of `tickwork run`.

    Deliveries retry for minutes, so digests keep a thread of their own and never hold up
    the firing of slots. At start it finishes dangling claims and publishes the latest
    period of each digest that was published before, if that period is still unclaimed.
    """

    def __init__(self, settings: Settings, publisher: Publisher, report: Report) -> None:
        self.digests = settings.digests
        self.publisher = publisher
        self.report = report

    def run(self, stopping: threading.Event) -> None:
        """Publish what start-up left behind, then every due period until `stopping` is set."""
        now = datetime.now(UTC)
        for name, config in self.digests.items():
            self._guarded(name, self.publisher.finish_dangling, name, config)
            if self.publisher.store.stream_version(digest_stream(name)):
                self._publish(name, config, last_period(config, now))
        triggers = {name: level_trigger(config) for name, config in self.digests.items()}
        Timetable(triggers, now).run(stopping, self._publish_due, poll_seconds=1.0)

    def _publish_due(self, due: list[Slot]) -> None:
        """Publish each digest's latest due period: one late delivery covers what it held up."""
        latest = {name: slot for slot, name in due}
        for name, slot in latest.items():
            config = self.digests[name]
            self._publish(name, config, period_ending(config, slot))

    def _publish(self, name: str, config: DigestConfig, period: Period) -> None:
        published = self._guarded(name, self.publisher.publish, name, config, period)
        if published is not None:
            failed = [t for t, result in published.delivery.items() if result != "ok"]
            outcome = f"not delivered to {', '.join(failed)}" if failed else "delivered"
            self.report(f"digest {name} {period.stamp} published, {outcome}")

    def _guarded(self, name: str, action: Callable[..., T], *args: object) -> T | None:
        """A digest that cannot be built now (store down, …) is reported, not fatal."""
        try:
            return action(*args)
        except (StoreError, OSError, ValueError) as exc:
            self.report(f"digest {name}: {exc}")
            return None
