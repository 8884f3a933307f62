"""Live edits: `tickwork run` and `tickwork serve` take the file's levels on SIGHUP or edit.

Serve's API, dashboard and run-now buttons follow the file as the scheduler does
(`ServeReload`).

The file is read and validated whole, exactly as at start (`load_settings`), before
anything changes: an invalid one is refused with the same path-precise error, one line
says so and the levels in force keep running. An accepted file puts its levels in force
at once for every part of the process (`Settings.replace_levels`): added levels fire
from their next slot, removed ones stop firing while their ticks in flight finish, and
changed ones use the new settings from their next claimed slot. A tick runs with the
level settings its slot was claimed under (`SlotClaim.config`), so a tick queued or
running across a reload keeps the old ones.

Only `levels` and `[[budgets]]` reload (a budget's raised limit lifts the pause it
decided: `harness.scheduling.budget_watch`). The routing catalog has its own reload
(`harness.routing`); every other section (store, executor, runner, paths, api, prices,
alerts, digests, retention, governor, rag) is wired into long-lived objects at start, so
a change there is reported as waiting for a restart and the running values stay.

Each levels revision (a hash of the levels' effective settings, environment overrides
included) is stored once (`LevelsRecorded`), every tick names the one it was claimed
under (`TickScheduled.config_revision`), and every accepted reload is a `ConfigReloaded`
event with the levels added, removed and changed. A procrastinate worker reads the
settings of its tick's revision from the store, so a reload on the scheduler side
reaches ticks run on any host (`recorded_levels`).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID, uuid5

from harness.config import ConfigError, LevelConfig, Settings, load_settings, one_line
from harness.contracts import (
    CONFIG_STREAM,
    ConfigReloaded,
    LevelsRecorded,
    config_stream,
    decode,
    utcnow,
)
from harness.prices import refuse_unpayable_budgets
from harness.store import EventStore, StoreError, append_or_spool

if TYPE_CHECKING:
    from harness.routing import Router
    from harness.scheduling.service import Service

Report = Callable[[str], None]
LevelsHook = Callable[[Mapping[str, LevelConfig]], None]
"""Told of the levels in force after a reload (the local executor's per-level caps)."""

WATCH_SECONDS = 1.0
"""How often the file is looked at for a change (a SIGHUP is honoured at the next wake)."""
REVISIONS = UUID("9b1e7f4c-2d3a-4e5f-8a6b-7c8d9e0f1a2b")
"""Namespace of the recorded levels' event ids: one id per revision, on every replica."""


def levels_revision(levels: Mapping[str, LevelConfig]) -> str:
    """The sha256 of the levels' effective settings, the same on every host that reads them."""
    normalized = {name: config.model_dump(mode="json") for name, config in levels.items()}
    text = json.dumps(normalized, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def levels_record(levels: Mapping[str, LevelConfig], revision: str) -> LevelsRecorded:
    """The event that stores a revision's levels; the same event id for it, always."""
    return LevelsRecorded(
        event_id=uuid5(REVISIONS, revision),
        revision=revision,
        levels={name: config.model_dump(mode="json") for name, config in levels.items()},
    )


def record_levels(store: EventStore, levels: Mapping[str, LevelConfig]) -> str:
    """Store the levels under their revision unless stored already; returns the revision.

    Raises:
        StoreError: the store cannot take it.
    """
    revision = levels_revision(levels)
    record = levels_record(levels, revision)
    store.create_streams({record.stream_id: [record.to_record()]})
    return revision


def recorded_levels(store: EventStore, revision: str) -> dict[str, LevelConfig] | None:
    """The levels a revision names, as stored; None when it is not stored (an older scheduler).

    Raises:
        StoreError: the store cannot be read.
        pydantic.ValidationError: the stored settings do not validate on this host (a
            level's `output_schema` file missing here).
    """
    for stored in store.read_stream(config_stream(revision), limit=1):
        event = decode(stored)
        if isinstance(event, LevelsRecorded):
            return {name: LevelConfig.model_validate(data) for name, data in event.levels.items()}
    return None


def last_reload(store: EventStore) -> ConfigReloaded | None:
    """The latest reload any scheduler on the store accepted (None: none since they started).

    Raises:
        StoreError: the store cannot be read.
    """
    version = store.stream_version(CONFIG_STREAM)
    for stored in store.read_stream(CONFIG_STREAM, after=max(0, version - 1)):
        event = decode(stored)
        if isinstance(event, ConfigReloaded):
            return event
    return None


def reload_lines(
    settings: Settings, store: EventStore, whose: str = "this file"
) -> list[tuple[str, str]]:
    """`tickwork status`'s rows on the levels: this file's revision and the last reload.

    `whose`: where `settings` came from, when not the file (a bad one is not in force).

    Raises:
        StoreError: the store cannot be read.
    """
    revision = levels_revision(settings.levels)
    rows = [("levels", f"revision {revision[:12]} ({whose})")]
    reloaded = last_reload(store)
    if reloaded is None:
        return [*rows, ("reloaded", "never since the schedulers started (SIGHUP reloads)")]
    changes = LevelChanges(tuple(reloaded.added), tuple(reloaded.removed), tuple(reloaded.changed))
    when = f"{reloaded.occurred_at:%Y-%m-%d %H:%M:%S} UTC by pid {reloaded.pid} on {reloaded.host}"
    rows.append(("reloaded", when))
    rows.append(("", f"{reloaded.previous_revision[:12]} -> {reloaded.revision[:12]}"))
    rows.append(("", changes.describe()))
    if reloaded.revision != revision:
        rows.append(("", "this file's levels differ: SIGHUP reloads them"))
    return rows


@dataclass(frozen=True)
class LevelChanges:
    """Which levels a reload adds, removes and changes, each sorted by name."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    def __bool__(self) -> bool:
        """Whether any level was added, removed or changed."""
        return bool(self.added or self.removed or self.changed)

    def describe(self) -> str:
        """`added a, b; removed c; changed d`, or `no level changed`."""
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("added", self.added),
                ("removed", self.removed),
                ("changed", self.changed),
            )
            if names
        ]
        return "; ".join(parts) or "no level changed"


def level_changes(old: Mapping[str, LevelConfig], new: Mapping[str, LevelConfig]) -> LevelChanges:
    """What differs between two sets of levels (a level's every setting counts)."""
    return LevelChanges(
        added=tuple(sorted(set(new) - set(old))),
        removed=tuple(sorted(set(old) - set(new))),
        changed=tuple(sorted(name for name in set(old) & set(new) if old[name] != new[name])),
    )


RELOADED = ("levels", "budgets")
"""The sections a running service takes anew from its file."""


def restart_sections(old: Settings, new: Settings) -> list[str]:
    """The sections besides `RELOADED` whose settings differ: they wait for a restart."""
    fields = [name for name in type(old).model_fields if name not in RELOADED]
    return [name for name in fields if getattr(old, name) != getattr(new, name)]


class SettingsReload(ABC):
    """A process's levels and budgets, reloaded on request (SIGHUP) or when the file changes.

    Reading and validating the file (`look`) happens on a watcher thread (`watch`): at
    1,000 levels it costs about 0.1 s of CPU. A signal handler only sets a flag
    (`request`). Where the file's levels go is the subclass's: the scheduler's service
    (`LevelsReload`) or what `tickwork serve` shows and starts (`ServeReload`).
    """

    def __init__(
        self, settings: Settings, path: Path, report: Report, router: Router | None
    ) -> None:
        """`settings`: the process's, shared by every part of it, changed in place."""
        self.settings = settings
        self.path = path
        self.report = report
        self.router = router
        self._requested = threading.Event()
        self._seen = self._digest()
        self._settling: str | None = None
        """A changed content seen once: taken when the next look finds it unchanged."""
        self._looked_at = time.monotonic()
        self._watching = False
        self._lock = threading.Lock()
        self._loaded: Settings | None = None
        """A valid file read by `look`, waiting for `take` to put it in force."""

    def request(self) -> None:
        """Safe in a signal handler: the file is read at once, even unchanged."""
        self._requested.set()

    def watch(self, stopping: threading.Event) -> threading.Thread:
        """Look at the file every WATCH_SECONDS, and at once on `request`, on a daemon thread."""
        self._watching = True

        def loop() -> None:
            while not stopping.is_set():
                self._requested.wait(WATCH_SECONDS)
                if not stopping.is_set():
                    self.look()
                    self._looked()

        thread = threading.Thread(target=loop, name="levels-watch", daemon=True)
        thread.start()
        return thread

    @abstractmethod
    def _looked(self) -> None:
        """After each look of the watcher thread: where an accepted file is taken, if here."""

    def look(self, forced: bool = False) -> None:
        """Read and validate the file when asked or changed; a valid one waits for `take`.

        A change is taken once two looks in a row find the same content, so a file read
        while an editor writes it in place is not put in force half-written; a SIGHUP
        (`forced`, `request`) takes the file as it is. An invalid one is reported with its
        errors and nothing else happens.
        """
        digest = self._digest()
        if not (forced or self._requested.is_set()):
            if digest == self._seen:
                return
            if digest != self._settling:  # an editor may be half-way through writing it
                self._settling = digest
                return
        self._requested.clear()
        self._seen = digest
        try:
            new = load_settings(self.path)
            self._check(new)
        except ConfigError as exc:
            in_force = levels_revision(self.settings.levels)
            self.report(
                f"{self.path} rejected ({one_line(str(exc), str(self.path))}): levels revision "
                f"{in_force[:12]} stays in force (an edit or SIGHUP reads the file again)"
            )
            return
        with self._lock:
            self._loaded = new

    def take(self) -> bool:
        """Put a file `look` accepted in force; False when there is none waiting."""
        with self._lock:
            new, self._loaded = self._loaded, None
        if new is None:
            return False
        self.put_in_force(new)
        return True

    def reload(self) -> bool:
        """Read, validate and put in force the file's levels now; False when it is refused."""
        self.look(forced=True)
        return self.take()

    def put_in_force(self, new: Settings) -> None:
        """The levels and budgets of a validated file in force, each change reported."""
        settings = self.settings
        old = levels_revision(settings.levels)
        restart = restart_sections(settings, new)
        if restart:
            self.report(
                f"{self.path}: [{'], ['.join(restart)}] changed: they take effect at the next "
                "restart; the running values stay"
            )
        if new.budgets != settings.budgets:
            settings.replace_budgets(new.budgets)
            self.report(f"{self.path}: [[budgets]] reloaded ({len(new.budgets)} in force)")
        changes = level_changes(settings.levels, new.levels)
        if not changes:
            self.report(f"{self.path} reloaded: no level changed (revision {old[:12]})")
            return
        self._take_levels(new.levels, changes)
        revision = levels_revision(settings.levels)
        self.report(
            f"{self.path} reloaded: levels revision {old[:12]} -> {revision[:12]} "
            f"({changes.describe()})"
        )
        self._reloaded(old, revision, changes, restart)

    @abstractmethod
    def _take_levels(self, levels: dict[str, LevelConfig], changes: LevelChanges) -> None:
        """Every part of the process takes the new levels."""

    @abstractmethod
    def _reloaded(self, old: str, revision: str, changes: LevelChanges, restart: list[str]) -> None:
        """After the levels changed from revision `old` to `revision`."""

    def _check(self, new: Settings) -> None:
        """What the load cannot check alone: the catalog lanes and the budgets' prices.

        A level without a model needs a lane of the catalog in force; a USD budget must
        pay one tick of each level it covers at its model's price, unless a lane routes it.

        Raises:
            ConfigError: naming the file and each level that could not run.
        """
        lanes = self.router.source.catalog.lanes.keys() if self.router is not None else set()
        refuse_unpayable_budgets(new, str(self.path), utcnow().date().isoformat(), lanes)
        modelless = sorted(name for name, level in new.levels.items() if not level.model)
        missing = [name for name in modelless if name not in lanes]
        if self.router is None:
            why = "there is no [routing] catalog in force (a new one takes a restart)"
        else:
            why = "the catalog in force has no lane for it"
        if missing:
            lines = "\n".join(f"  levels.{name}: has no model, and {why}" for name in missing)
            raise ConfigError(f"{self.path}: invalid configuration\n{lines}")

    def _digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None


class LevelsReload(SettingsReload):
    """The scheduler's levels: put in force between two waves, recorded in the store.

    A valid file is put in force by `poll`, on the timetable's own thread (the service's
    `wake`), so triggers and next slots change between two looks of the loop, never
    during a wave.
    """

    def __init__(
        self,
        service: Service,
        path: Path,
        report: Report,
        hooks: Sequence[LevelsHook] = (),
    ) -> None:
        super().__init__(service.settings, path, report, service.router)
        self.service = service
        self.hooks = hooks
        self.unrecorded: Mapping[str, LevelConfig] | None = service.settings.levels
        """The levels in force, until they are stored (the store may be out)."""

    def poll(self) -> None:
        """Put a file `look` accepted in force; store the levels the store did not take yet.

        Without a watcher thread (`watch`), it looks at the file itself when due.
        """
        if not self._watching and (
            self._requested.is_set() or time.monotonic() - self._looked_at >= WATCH_SECONDS
        ):
            self._looked_at = time.monotonic()
            self.look()
        self.take()
        self._record_levels()

    def _looked(self) -> None:
        """Nothing: the timetable's thread takes the file, between two waves (`poll`)."""

    def _take_levels(self, levels: dict[str, LevelConfig], changes: LevelChanges) -> None:
        """The service takes the new levels, then the other parts that hold them (hooks)."""
        self.service.take_levels(levels, {*changes.added, *changes.changed})
        for hook in self.hooks:
            hook(self.settings.levels)
        self.unrecorded = levels

    def _reloaded(self, old: str, revision: str, changes: LevelChanges, restart: list[str]) -> None:
        """Every accepted reload of a scheduler is an event (`ConfigReloaded`)."""
        reloaded = ConfigReloaded(
            path=str(self.path),
            revision=revision,
            previous_revision=old,
            added=list(changes.added),
            removed=list(changes.removed),
            changed=list(changes.changed),
            restart=restart,
            host=socket.gethostname(),
            pid=os.getpid(),
        )
        service = self.service
        append_or_spool(service.store, service.spool, reloaded.stream_id, [reloaded.to_record()])

    def _record_levels(self) -> None:
        """Store the levels in force once, before a worker needs them; retried while out."""
        if self.unrecorded is None:
            return
        try:
            record_levels(self.service.store, self.unrecorded)
        except StoreError:
            return  # the next wake tries again
        self.unrecorded = None


class ServeReload(SettingsReload):
    """What `tickwork serve` shows and starts: its levels follow the file as the scheduler's do.

    Its API, dashboard and run-now buttons read the levels from the settings they share,
    so the new ones are put in force on the watcher thread as soon as they are read (the
    dict is swapped whole). The scheduler records the reload (`ConfigReloaded`); serve
    only says it in its own output.
    """

    def _looked(self) -> None:
        self.take()

    def _take_levels(self, levels: dict[str, LevelConfig], changes: LevelChanges) -> None:
        self.settings.replace_levels(levels)

    def _reloaded(self, old: str, revision: str, changes: LevelChanges, restart: list[str]) -> None:
        """Nothing: the scheduler records its own reload of the same file."""
