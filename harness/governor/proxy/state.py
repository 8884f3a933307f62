"""What the proxy knows between requests: the decision on each, and how it is settled.

`judge` is the decide step of a request's path (the policy's verdict, counters, alerts);
`settle` books an answer's usage once it is read (calibration, ledger) and `finish`
writes the request's log line when its answer has ended. `status` is what
`/governor/status` shows of all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any, Literal

import orjson

from harness.config import GovernorConfig
from harness.contracts import BudgetSpent, RateLimit, Sample
from harness.governor.alerts import Alerts, Announcer
from harness.governor.calibration import Calibrations
from harness.governor.estimate import tokens_from_chars
from harness.governor.ledger import Entry, Ledger
from harness.governor.policy import Verdict, decide
from harness.governor.proxy.dialects import Body, Dialect
from harness.governor.usage import Usage, UsageScanner, priced_apart
from harness.prices import PriceBook
from harness.projections import current_calibrations
from harness.store import EventStore, Spool

RECENT_DECISIONS = 50
EARLIER_COUNTERS = ("chat", "soft", "hard", "passthrough", "tokens_prompt", "tokens_completion")
"""The earlier governor's counters, shown from the start (at 0) for the dashboards reading
them; `passthrough` counts the chat requests forwarded as sent (pass and defer)."""
FORWARDED_AS_SENT = ("pass", "defer")
Ending = Literal["answered", "cut", "unfinished", "truncated", "client_gone", "unreachable"]
"""How a chat request ended: answered in full (by the upstream, or by the governor's hard
stop), its answer cut or stalled upstream, its stream ended cleanly but without the
turn's end (`unfinished`) or at its output limit (`truncated`: both told by a tick's
`proxy.turns.TurnGate`), its client gone first, or no upstream answer."""


def episode_of(dialect: Dialect, body: Body) -> str:
    """A conversation is known by its model and opening messages, which every turn resends."""
    opening = orjson.dumps(dialect.opening(body), default=str)
    return hashlib.sha256(opening).hexdigest()[:16]


@dataclass(frozen=True)
class Judged:
    """One chat request's decision, carried along its path until its answer has ended.

    `entry` is the decision among the recent ones the status shows; `settle` completes it
    with the exact prompt tokens and `finish` with how the answer ended.
    """

    dialect: Dialect
    verdict: Verdict
    entry: dict[str, Any]
    tick_id: str | None
    reply: str | None = None
    """Set when the call is answered with this text in place of the model's, as a hard stop
    is: a tick's own governor stops an agent CLI at its tool cap or daily budget so."""


class ProxyGovernor:
    """What the proxy knows between requests: calibration, counters, recent decisions."""

    def __init__(
        self,
        config: GovernorConfig,
        calibrations: Calibrations,
        ledger: Ledger | None,
        alerts: Alerts,
        decision_log: IO[str] | None = None,
        rate_limits: Mapping[str, RateLimit] | None = None,
        prices: PriceBook | None = None,
    ) -> None:
        self.config = config
        self.prices = prices or PriceBook()
        """What the proxy books its clients' calls at: `[prices]`, then genai-prices."""
        self.rate_limits = dict(rate_limits or {})
        """Provider host -> its shared rate limit (`[rate_limits]`), taken per chat request."""
        self.limits = config.limits()
        self.calibrations = calibrations
        self.ledger = ledger
        self.alerts = alerts
        self.decision_log = decision_log
        self.announcer = Announcer(
            config.announce_url, config.announce_throttle_seconds, config.announce_text
        )
        self.started = time.monotonic()
        self.counters: Counter[str] = Counter()
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_DECISIONS)

    def judge(self, dialect: Dialect, body: Body, tick_id: str | None) -> Judged:
        """Decide on one request, count it and keep it in the recent decisions the status shows.

        Both APIs' requests count as `chat` (the earlier governor's name for a governed
        request), and each under its API's name.
        """
        model = str(body.get("model") or "")
        chars = dialect.chars(body)
        verdict = decide(
            self.limits, model, chars, self.calibrations.ratio(model), dialect.tail(body)
        )
        self.counters[verdict.decision] += 1
        self.counters["chat"] += 1
        self.counters[dialect.api] += 1
        if verdict.decision in FORWARDED_AS_SENT:
            self.counters["passthrough"] += 1
        entry: dict[str, Any] = {
            "at": datetime.now(UTC).isoformat(),
            "api": dialect.api,
            "decision": verdict.decision,
            "model": model,
            "chars": chars,
            "est_tokens": verdict.est_tokens,
            "threshold": verdict.threshold,
            "chars_per_token": round(verdict.ratio, 4),
            "exact_prompt_tokens": None,
            "streamed": bool(body.get("stream")),
            "status": None,
            "ended": None,
        }
        self.recent.append(entry)
        if verdict.decision != "pass":
            self._record(tick_id, lambda: verdict.event("proxy", None))
        if self.alerts.urls and self.alerts.opens_episode(episode_of(dialect, body), verdict):
            task = asyncio.get_running_loop().run_in_executor(
                None, self.alerts.send, verdict, "governor proxy"
            )
            task.add_done_callback(lambda done: done.exception())
        if self.announcer.due(verdict):
            announced = asyncio.get_running_loop().run_in_executor(
                None, self.announcer.post, verdict
            )
            announced.add_done_callback(lambda done: done.exception())
        return Judged(dialect, verdict, entry, tick_id)

    def settle(self, judged: Judged, answer: UsageScanner) -> None:
        """Calibrate from the answer's usage, count its exact tokens and book its spend."""
        verdict, entry, tick_id = judged.verdict, judged.entry, judged.tick_id
        model = verdict.model
        usage = answer.finish()
        if usage is not None:
            entry["exact_prompt_tokens"] = usage.prompt_tokens
            self.counters["tokens_prompt"] += usage.prompt_tokens
            self.counters["tokens_completion"] += usage.completion_tokens
        if usage is None:
            self.counters["no_usage"] += 1
            prompt = verdict.est_tokens
            completion = tokens_from_chars(answer.answer_chars, verdict.ratio)
        else:
            sample = Sample(verdict.chars, usage.prompt_tokens, usage.cached_tokens, usage.cached)
            self.counters[f"calibration_{self.calibrations.learn(model, sample)}"] += 1
            if not sample.tiny:
                self._record(tick_id, lambda: sample.event(model, "proxy", None))
            prompt, completion = sample.tokens, usage.completion_tokens
        self.book(judged, prompt, completion, usage, answer)

    def book(
        self,
        judged: Judged,
        prompt: int,
        completion: int,
        usage: Usage | None,
        answer: UsageScanner,
    ) -> None:
        """Book a settled call's spend: a client that is no tick's, in the proxy's ledger.

        A tick's own governor (an agent CLI's traffic) books it as the tick's instead, with
        what else `answer` saw (stop reason, first token).
        """
        model, tick_id = judged.verdict.model, judged.tick_id
        now = datetime.now(UTC)
        day = f"proxy-{now:%Y%m%d}"
        level = self.config.ledger_level
        cached = usage.cached_tokens if usage else None
        written = usage.cache_write_tokens if usage else None

        def spent() -> BudgetSpent:
            return BudgetSpent(
                tick_id=day,
                level=level,
                model=model,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cache_read_tokens=cached,
                cache_write_tokens=written,
                **priced_apart(usage),
                estimated=usage is None,
                source="proxy",
            ).priced(self.prices.call_price(model, now.date().isoformat()))

        self._record(tick_id, spent)

    def finish(self, judged: Judged, status: int | None, ended: Ending) -> None:
        """Complete a decision with how its answer ended, and write its line to the log.

        The line is written only now, so it holds the exact prompt tokens next to the
        estimate, and the upstream's status (None when the upstream was not asked or did
        not answer): estimate against truth can be checked from the log alone.
        """
        entry = judged.entry
        if entry["ended"] is not None:
            return  # the client left just as the relay had finished the answer: one line
        entry["status"] = status
        entry["ended"] = ended
        if self.decision_log is not None:
            self.decision_log.write(orjson.dumps(entry).decode() + "\n")

    def estimate(self, dialect: Dialect, body: Body) -> int:
        """The prompt tokens of a request as the governor estimates them (`count_tokens`)."""
        self.counters["count_tokens_estimated"] += 1
        model = str(body.get("model") or "")
        return tokens_from_chars(dialect.chars(body), self.calibrations.ratio(model))

    def client_gone(self) -> None:
        """Count a client that left before its answer ended."""
        self.counters["client_gone"] += 1

    def _record(self, tick_id: str | None, entry: Entry) -> None:
        if self.ledger is not None and tick_id is None:
            self.ledger.record(entry)

    def status(self) -> dict[str, Any]:
        """What `/governor/status` reports: limits, counters, learned ratios, recent decisions."""
        learned = self.calibrations.models
        return {
            "ok": True,
            "uptime_s": int(time.monotonic() - self.started),
            "upstream": self.config.public_upstream,
            "anthropic_upstream": self.config.public_anthropic_upstream,
            "soft_tokens": self.limits.soft_tokens,
            "hard_tokens": self.limits.hard,
            "soft": self.limits.soft_tokens,
            "hard": self.limits.hard or None,
            "calibrate": self.limits.calibrate,
            "initial_chars_per_token": self.limits.chars_per_token,
            "calibration_default": self.limits.chars_per_token,
            "exempt_models": list(self.limits.exempt_models),
            "counters": dict.fromkeys(EARLIER_COUNTERS, 0) | self.counters,
            "alerts": {"targets": len(self.alerts.urls), "sent": self.alerts.sent},
            "announce": {
                "on": self.announcer.url is not None,
                "sent": self.announcer.sent,
                "failed": self.announcer.failed,
            },
            "calibration": {
                model: {
                    "chars_per_token": round(self.calibrations.ratio(model), 4),
                    "samples": state.samples,
                    "ignored": state.ignored,
                }
                for model, state in sorted(learned.items())
            },
            "decisions": list(self.recent),
            "recent": [earlier_entry(entry) for entry in reversed(self.recent)],
        }


def earlier_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A decision as the earlier governor's `recent` listed it, for the dashboards reading it."""
    decision = entry["decision"]
    return {
        "t": int(datetime.fromisoformat(entry["at"]).timestamp()),
        "model": entry["model"],
        "est": entry["est_tokens"],
        "exact": entry["exact_prompt_tokens"],
        "action": "passthrough" if decision == "pass" else decision,
    }


@contextlib.contextmanager
def proxy_governor(
    config: GovernorConfig,
    store: EventStore | None,
    spool: Spool,
    alerts: Alerts,
    rate_limits: Mapping[str, RateLimit] | None = None,
    prices: PriceBook | None = None,
) -> Iterator[ProxyGovernor]:
    """The governor's state, started from the calibration projection; flushed on exit."""
    with contextlib.ExitStack() as stack:
        ledger = Ledger(store, spool)
        stack.callback(ledger.close)
        decision_log = None
        if config.log is not None:
            decision_log = stack.enter_context(config.log.open("a", encoding="utf-8", buffering=1))
        learned = current_calibrations(store) if store is not None else {}
        calibrations = Calibrations(config.chars_per_token, learned, config.calibrate)
        yield ProxyGovernor(config, calibrations, ledger, alerts, decision_log, rate_limits, prices)
