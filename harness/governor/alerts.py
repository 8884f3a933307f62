"""Operator notifications through apprise: one per episode, however often a session fires.

An episode is one conversation past the soft threshold: it begins at the first soft or
hard decision and ends when the conversation comes back under the threshold or stays
quiet for `episode_seconds`. A long session over its budget fires on every request; the
operator hears of it once.

Apprise URLs carry tokens, so they come from the environment only (`TICKWORK_ALERT_URLS`,
separated by commas or spaces) and are never logged, stored or shown.

Beside them, the earlier governor's announcement (`GOV_ANNOUNCE_URL`): a JSON POST of
`{text, subject, source, priority}` that a voice pipeline speaks. It is throttled over
all sessions together, as that governor did: a speaker must not talk over itself.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping

from harness.contracts import ALERT_URLS_ENV
from harness.governor.policy import Verdict, fill

_MAX_EPISODES = 10_000

log = logging.getLogger(__name__)


def urls_from_env(env: Mapping[str, str]) -> tuple[str, ...]:
    """The apprise URLs from the environment only, since they carry tokens."""
    return tuple(part for part in re.split(r"[\s,]+", env.get(ALERT_URLS_ENV, "")) if part)


class Alerts:
    """Tells the operator once per episode that a conversation went over the governor's limits."""

    def __init__(
        self,
        urls: tuple[str, ...],
        episode_seconds: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.urls = urls
        self.episode_seconds = episode_seconds
        self.clock = clock
        self.sent = 0
        self._last_seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def opens_episode(self, episode: str, verdict: Verdict) -> bool:
        """Track the episode; True when this verdict is its first soft or hard decision."""
        with self._lock:
            if verdict.decision == "pass":
                self._last_seen.pop(episode, None)
                return False
            now = self.clock()
            last = self._last_seen.get(episode)
            self._last_seen[episode] = now
            if len(self._last_seen) > _MAX_EPISODES:
                self._forget_before(now - self.episode_seconds)
            return last is None or now - last >= self.episode_seconds

    def send(self, verdict: Verdict, where: str, link: str | None = None) -> bool:
        """Notify every configured target; blocking (the proxy calls it in a thread).

        `link`: the page of the tick the request was of, ending the message.
        """
        if not self.urls:
            return False
        import apprise  # imported on first use: a tick without alerts never pays for it

        notifier = apprise.Apprise()
        for url in self.urls:
            notifier.add(url)
        title = f"tickwork governor: {verdict.decision} for {verdict.model}"
        body = (
            f"{where}: a request of about {verdict.est_tokens} tokens reached the "
            f"{verdict.decision} threshold of {verdict.threshold} (model {verdict.model})."
        ) + (f"\n{link}" if link else "")
        ok = bool(notifier.notify(title=title, body=body))
        if ok:
            with self._lock:
                self.sent += 1
        else:
            log.warning("governor alert for %s could not be delivered", where)
        return ok

    def _forget_before(self, cutoff: float) -> None:
        for episode in [key for key, seen in self._last_seen.items() if seen < cutoff]:
            del self._last_seen[episode]


ANNOUNCE_TIMEOUT_SECONDS = 4.0


class Announcer:
    """Posts the announcement of a soft or hard decision, at most once per throttle period."""

    def __init__(
        self,
        url: str | None,
        throttle_seconds: float,
        text: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.throttle_seconds = throttle_seconds
        self.text = text
        self.clock = clock
        self.sent = 0
        self.failed = 0
        self._last: float | None = None
        self._lock = threading.Lock()

    def due(self, verdict: Verdict) -> bool:
        """Whether to announce this verdict; claims the throttle period when it is."""
        if self.url is None or verdict.decision not in ("soft", "hard"):
            return False
        now = self.clock()
        with self._lock:
            if self._last is not None and now - self._last < self.throttle_seconds:
                return False
            self._last = now
            return True

    def post(self, verdict: Verdict) -> bool:
        """POST the announcement; blocking (the proxy calls it in a thread). Never raises."""
        import httpx

        assert self.url is not None, "due() said there is a URL"
        body = {
            "text": fill(self.text, verdict.est_tokens, verdict.threshold),
            "subject": "[Governor]",
            "source": "governor",
            "priority": "normal",
        }
        try:
            answer = httpx.post(self.url, json=body, timeout=ANNOUNCE_TIMEOUT_SECONDS)
            ok = answer.is_success
            problem = f"HTTP {answer.status_code}"
        except httpx.HTTPError as exc:
            ok, problem = False, type(exc).__name__
        with self._lock:
            if ok:
                self.sent += 1
            else:
                self.failed += 1
        if not ok:
            log.warning("governor announcement not delivered: %s", problem)
        return ok
