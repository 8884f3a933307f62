"""Operator notifications through apprise: one per episode, however often a session fires.

An episode is one conversation past the soft threshold: it begins at the first soft or
hard decision and ends when the conversation comes back under the threshold or stays
quiet for `episode_seconds`. A long session over its budget fires on every request; the
operator hears of it once.

Apprise URLs carry tokens, so they come from the environment only (`TICKWORK_ALERT_URLS`,
separated by commas or spaces) and are never logged, stored or shown.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping

from harness.contracts.secrets import ALERT_URLS_ENV
from harness.governor.policy import Verdict

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

    def send(self, verdict: Verdict, where: str) -> bool:
        """Notify every configured target; blocking (the proxy calls it in a thread)."""
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
        )
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
