"""Whether a cloud target has quota left, known before a tick chooses it.

Two sources feed one record, `QuotaObserved`: the target's probe (an HTTP GET or a
command answering JSON, run when no observation is fresh) and the rate-limit headers of
every answer (`x-ratelimit-remaining-requests`/`-tokens`, `retry-after`). Like
availability, the cache is the store itself: every tick, replica and host reads the
observations the others recorded, so a probe runs about once per TTL, not once per tick.
A probe that cannot be read does not show quota left, so it passes the target over too.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx

from harness.contracts import QuotaObserved, QuotaProbe, RouteCandidate, decode
from harness.store import EventStore, StoreError

LOOKBACK_EVENTS = 50_000
"""How far back (in events of any type) observations are looked for, as for availability."""
ANSWER_HOLD_SECONDS = 60.0
"""How long an answer saying no quota is left holds without a `retry-after` or a probe TTL."""
DETAIL_CHARS = 300


class QuotaExhaustedError(Exception):
    """No candidate of the tick's route has quota left: an infrastructure failure."""


class ProbeError(Exception):
    """The probe gave no reading: unreachable, failed, not JSON, or no number at the path."""


def _at(document: Any, path: str) -> Any:
    """The value at a dotted path (`data.limits.0.remaining`) of a JSON document."""
    value = document
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise ProbeError(f"the answer has no {path!r} (missing at {part!r})")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProbeError(f"{what} is {type(value).__name__}, not a number")
    return float(value)


def remaining_at(document: Any, path: str) -> float:
    """The number at a dotted path (`data.limits.0.remaining`) of a JSON document."""
    return _number(_at(document, path), repr(path))


@dataclass(frozen=True)
class Reading:
    """What a probe showed: the quota left, and which required capacity has the least."""

    remaining: float
    capacity: str | None = None


def reading_of(document: Any, probe: QuotaProbe) -> Reading:
    """The quota an answer shows; with required capacities, the one of them with least left.

    A required capacity the answer does not list is no reading: the target is passed over
    rather than run on a limit nobody could see.
    """
    if probe.required_capacities is None:
        return Reading(remaining_at(document, probe.remaining_path))
    capacities = _at(document, probe.remaining_path)
    if not isinstance(capacities, dict):
        kind = type(capacities).__name__
        raise ProbeError(f"{probe.remaining_path!r} is {kind}, not an object of capacities")
    left: dict[str, float] = {}
    for name in probe.required_capacities:
        if name not in capacities:
            raise ProbeError(f"the answer lists no capacity {name!r}")
        left[name] = _number(capacities[name], f"capacity {name!r}")
    least = min(left, key=left.__getitem__)
    return Reading(left[least], least)


def run_probe(probe: QuotaProbe, env: Mapping[str, str]) -> Reading:
    """The quota left by the probe's answer; raises ProbeError when there is no reading."""
    try:
        if probe.url is not None:
            headers = {}
            if probe.header_env is not None:
                value = env.get(probe.header_env)
                if not value:
                    raise ProbeError(f"{probe.header_env} is not set")
                headers[probe.header] = value
            response = httpx.get(probe.url, headers=headers, timeout=probe.timeout_seconds)
            if response.status_code != 200:
                raise ProbeError(f"GET answered HTTP {response.status_code}")
            text = response.text
        else:
            assert probe.command is not None, "a validated probe has a url or a command"
            done = subprocess.run(
                probe.command,
                capture_output=True,
                text=True,
                timeout=probe.timeout_seconds,
                env=dict(env),
                check=False,
            )
            if done.returncode != 0:
                raise ProbeError(f"{probe.command[0]} exited {done.returncode}")
            text = done.stdout
        return reading_of(json.loads(text), probe)
    except (httpx.HTTPError, OSError, subprocess.SubprocessError) as exc:
        raise ProbeError(f"{type(exc).__name__}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ProbeError(f"the answer is not JSON: {exc}") from exc


@dataclass(frozen=True)
class AnswerQuota:
    """What an answer's rate-limit headers said; `exhausted` when one of them reached zero."""

    requests_left: int | None
    tokens_left: int | None
    retry_after_seconds: float | None

    @property
    def exhausted(self) -> bool:
        """No requests or no tokens left."""
        return self.requests_left == 0 or self.tokens_left == 0


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _seconds(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value < 86_400 else None


def answer_quota(headers: Mapping[str, str]) -> AnswerQuota | None:
    """The rate-limit headers of an answer, or None when it has none of them.

    OpenAI's (and most gateways') `x-ratelimit-remaining-*`, or Anthropic's
    `anthropic-ratelimit-*-remaining`.
    """
    requests = headers.get("x-ratelimit-remaining-requests")
    tokens = headers.get("x-ratelimit-remaining-tokens")
    found = AnswerQuota(
        requests_left=_count(requests or headers.get("anthropic-ratelimit-requests-remaining")),
        tokens_left=_count(tokens or headers.get("anthropic-ratelimit-tokens-remaining")),
        retry_after_seconds=_seconds(headers.get("retry-after")),
    )
    if found == AnswerQuota(None, None, None):
        return None
    return found


def latest_observations(store: EventStore | None) -> dict[str, QuotaObserved]:
    """Each target's last recorded observation; nothing when the store cannot be read."""
    if store is None:
        return {}
    try:
        after = store.lookback(LOOKBACK_EVENTS)
        stored = store.read_all(after, LOOKBACK_EVENTS, [QuotaObserved.type])
    except StoreError:
        return {}
    latest: dict[str, QuotaObserved] = {}
    for record in stored:
        event = decode(record)
        if isinstance(event, QuotaObserved):
            latest[event.target] = event
    return latest


def holds_until(observation: QuotaObserved, probe: QuotaProbe | None) -> datetime:
    """Until when an observation stands for the target's quota."""
    ttl = probe.ttl_seconds if probe is not None else ANSWER_HOLD_SECONDS
    hold = max(ttl, observation.retry_after_seconds or 0.0)
    return observation.occurred_at + timedelta(seconds=hold)


def why_exhausted(observation: QuotaObserved) -> str:
    """The reason a passed-over target records, after `quota: `."""
    if observation.detail and observation.remaining is None:
        said = observation.detail
    elif observation.source == "probe":
        said = f"{observation.remaining:g} left, minimum {observation.minimum:g}"
        if observation.detail:
            said = f"{observation.detail}: {said}"
    else:
        said = f"requests left {observation.requests_left}, tokens left {observation.tokens_left}"
    return f"{said} ({observation.source} at {observation.occurred_at:%H:%M:%S} UTC)"


@dataclass
class QuotaGate:
    """A tick's view of its candidates' quota: the store's observations, and its own probes."""

    tick_id: str
    level: str
    store: EventStore | None
    env: Mapping[str, str]
    observations: dict[str, QuotaObserved] = field(default_factory=dict)
    loaded: bool = False

    def check(self, candidate: RouteCandidate, now: datetime) -> tuple[str | None, bool]:
        """Why the candidate has no quota (None: it may run), and whether it was probed now."""
        if not self.loaded:
            self.observations = latest_observations(self.store)
            self.loaded = True
        probe = candidate.quota_probe
        known = self.observations.get(candidate.target)
        if known is not None and holds_until(known, probe) < now:
            known = None
        if known is None and probe is None:
            return None, False
        if known is not None:
            return (why_exhausted(known) if known.exhausted else None), False
        assert probe is not None
        probed = self.probe(candidate.target, probe)
        self.observations[candidate.target] = probed
        return (why_exhausted(probed) if probed.exhausted else None), True

    def probe(self, target: str, probe: QuotaProbe) -> QuotaObserved:
        """Run the target's probe and say what it showed (unrecorded)."""
        try:
            reading = run_probe(probe, self.env)
        except ProbeError as exc:
            return QuotaObserved(
                tick_id=self.tick_id,
                level=self.level,
                target=target,
                source="probe",
                exhausted=True,
                minimum=probe.minimum,
                detail=f"probe failed: {exc}"[:DETAIL_CHARS],
            )
        return QuotaObserved(
            tick_id=self.tick_id,
            level=self.level,
            target=target,
            source="probe",
            exhausted=reading.remaining < probe.minimum,
            remaining=reading.remaining,
            minimum=probe.minimum,
            detail=None if reading.capacity is None else f"capacity {reading.capacity}",
        )
