"""The procrastinate executor: a job per tick on the store's PostgreSQL, run by any host.

`tickwork run` decides and claims waves as with the local executor, then defers one job
per claimed tick (`ProcrastinateExecutor`); `tickwork worker`s on any host take the jobs
and run them through the runner and launcher (`WorkerExecutor`). The jobs live in
procrastinate's tables beside the events, so a deployment still needs nothing but
PostgreSQL.

The claim is the outbox. Deferring is idempotent, keyed by tick id: under one advisory
lock a tick that has a job already (in any state) gets no second one. A scheduler that
cannot defer retries until it can; one killed between its claim and the defer leaves a
claimed tick that any live `tickwork run` finds by liveness (`harness.scheduling.reconcile`;
on another host through `claimer_gone`) and defers, so a crash neither loses nor
duplicates a tick. A job delivered twice starts its tick once: the worker appends `TickTaken` at the
stream version it read, and only one append can land.

Priorities are procrastinate priorities (a lower tickwork number runs first); the global
cap is the sum of the workers' concurrency; a level's `max_concurrent` N holds across all
hosts through procrastinate locks: its jobs are spread over N lock names
(`tickwork:<level>:<k>`) and procrastinate runs at most one job of a lock at a time.
A worker whose heartbeat stops (SIGKILL, host lost) is found by any other worker
(`sweep_stalled`): each tick it had taken ends `TickLost` once (appended at the version
read), a job it had not yet taken is retried, and a surviving tick process on the
sweeper's host is killed with its group, and the model call it may have had in flight is
booked, estimated (`harness.execution.cutoff`), as the runner books a killed worker's.
Panels and hedges run on the worker that took the slot's job, their members and twins in
places of its concurrency that the job took before it started (`WorkerExecutor.seat`); a
dead worker's members and twins end with its job's tick.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import orjson
import sqlalchemy as sa
from procrastinate.schema import SchemaManager
from procrastinate.sql import queries as procrastinate_queries

from harness.config import LevelConfig, Settings
from harness.contracts.events import (
    TERMINAL_TYPES,
    THROTTLE_STREAM,
    StartsSpaced,
    TickEvent,
    TickLost,
    TickTaken,
    WorkerStarted,
    tick_stream,
    utcnow,
)
from harness.execution.adopt import Adoption, started_ref
from harness.execution.executors.base import Ended, Executor, Report
from harness.execution.hedge import TWIN_SUFFIX
from harness.execution.launchers import TickProcess
from harness.execution.panels import REPLACEMENT
from harness.execution.prepare import Preparer, TickRef
from harness.execution.queue import Gate
from harness.execution.runner import Runner
from harness.scheduling.handoff import RunningTick
from harness.scheduling.waves import SlotClaim
from harness.store import (
    ANY,
    NO_STREAM,
    ConcurrencyError,
    EventStore,
    StoredEvent,
    StoreError,
    process_name,
)

TASK = "tickwork.run_tick"
"""The one procrastinate task: run the tick named by its `tick_id` argument."""
DEFER_LOCK = 0x7469636B
"""Advisory lock held while checking for a tick's job and deferring it ("tick")."""
SCHEMA_LOCK = DEFER_LOCK + 1
"""Advisory lock of `tickwork migrate` applying procrastinate's schema (two at once)."""
REDELIVER_SECONDS = 2.0
TAKEN = {"TickTaken", "TickStarted"}
KILLED_GONE_SECONDS = 5.0
"""How long a sweeper waits for a stalled tick's SIGKILLed group to be gone before it books
the call the tick may have had in flight (a SIGKILLed process is gone in milliseconds)."""
KILLED_POLL_SECONDS = 0.01
RETRY_JOB = "SELECT procrastinate_retry_job_v2(%(id)s, now(), NULL, NULL, NULL)"
DEFAULT_CONCURRENCY = 4
"""`tickwork worker --concurrency`'s default: the places a worker has until it is seated."""
PART = re.compile(rf"(.+)(?:-p\d+|-p{REPLACEMENT}|{TWIN_SUFFIX})")
"""The tick id of a panel member or hedge twin; its group is the tick it belongs to."""


@dataclass(frozen=True)
class JobTick:
    """A tick as a job carries it."""

    tick_id: str
    level: str
    job_id: int | None = None


def schema_present(conn: sa.Connection) -> bool:
    """Whether procrastinate's tables exist in the store's database."""
    return conn.exec_driver_sql("SELECT to_regclass('procrastinate_jobs')").scalar() is not None


MIGRATIONS = sorted(Path(SchemaManager.get_migrations_path()).glob("*.sql"))
"""procrastinate's migrations, oldest first (their names sort by version)."""
MARK = "procrastinate schema "
"""How the comment on `procrastinate_jobs` starts: the rest names the last migration in."""
UNMARKED = "03.04.00_50_post_add_retry_failed_job_procedure"
"""The schema of a database tickwork set up before it marked versions: procrastinate
3.10's `schema.sql`, which holds every migration up to this one."""


def schema_version(conn: sa.Connection) -> str | None:
    """The last procrastinate migration the store's schema holds; None without its tables."""
    if not schema_present(conn):
        return None
    comment = conn.exec_driver_sql(
        "SELECT obj_description('procrastinate_jobs'::regclass, 'pg_class')"
    ).scalar()
    return comment.removeprefix(MARK) if comment and comment.startswith(MARK) else UNMARKED


def apply_schema(store: EventStore) -> tuple[str | None, str]:
    """Install procrastinate's schema, or upgrade it with the migrations it lacks.

    procrastinate's `schema.sql` only creates (it fails on a schema that exists), and its
    migrations upgrade; the version a database holds is kept in a comment on its job
    table, which lives and dies with the schema. Each migration is applied in a
    transaction of its own, holding SCHEMA_LOCK (two `tickwork migrate` at once apply
    each once), and the comment moves on with it. Returns the version before and after.
    """
    with store.read_transaction() as conn:
        before = schema_version(conn)
    while True:
        with store.read_transaction() as conn:
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": SCHEMA_LOCK})
            version = schema_version(conn)
            if version is None:
                conn.exec_driver_sql(SchemaManager.get_schema().replace("%", "%%"))
                _mark(conn, MIGRATIONS[-1].stem)
                continue
            pending = [m for m in MIGRATIONS if m.stem > version]
            if not pending:
                conn.exec_driver_sql(
                    "CREATE INDEX IF NOT EXISTS tickwork_procrastinate_tick "
                    "ON procrastinate_jobs ((args->>'tick_id'))"
                )
                _mark(conn, version)
                return before, version
            conn.exec_driver_sql(pending[0].read_text().replace("%", "%%"))
            _mark(conn, pending[0].stem)


def _mark(conn: sa.Connection, version: str) -> None:
    conn.exec_driver_sql(f"COMMENT ON TABLE procrastinate_jobs IS '{MARK}{version}'")


def job_priority(settings: Settings, level: str) -> int:
    """Higher procrastinate priorities run first, and lower tickwork numbers."""
    config = settings.levels.get(level)
    return -config.priority if config is not None else 0


class Locks:
    """Spreads a level's jobs over as many procrastinate locks as its `max_concurrent`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._turns: dict[str, Iterator[int]] = defaultdict(itertools.count)

    def next(self, level: str) -> str | None:
        """The lock of the level's next job; None for a level without a cap."""
        config = self.settings.levels.get(level)
        cap = config.max_concurrent if config is not None else None
        if cap is None:
            return None
        return f"tickwork:{level}:{next(self._turns[level]) % cap}"


def defer(
    store: EventStore, settings: Settings, locks: Locks, claims: Sequence[SlotClaim]
) -> list[str]:
    """Defer a job for every claim that has none yet; returns the tick ids deferred now."""
    if not claims:
        return []
    ids = [claim.tick_id for claim in claims]
    with store.read_transaction() as conn:
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": DEFER_LOCK})
        existing = set(
            conn.exec_driver_sql(
                "SELECT args->>'tick_id' FROM procrastinate_jobs "
                "WHERE args->>'tick_id' = ANY(%(ids)s) AND task_name = %(task)s",
                {"ids": ids, "task": TASK},
            ).scalars()
        )
        fresh = [claim for claim in claims if claim.tick_id not in existing]
        if not fresh:
            return []
        slots = [claim.slot.isoformat() if claim.slot else None for claim in fresh]
        conn.exec_driver_sql(
            "SELECT procrastinate_defer_jobs_v1(ARRAY(SELECT ROW(%(queue)s, %(task)s, "
            "p, l, NULL, a, NULL)::procrastinate_job_to_defer_v1 "
            "FROM unnest(%(priorities)s::int[], %(locks)s::text[], %(args)s::jsonb[]) "
            "AS jobs(p, l, a)))",
            {
                "queue": settings.executor.queue,
                "task": TASK,
                "priorities": [job_priority(settings, claim.level) for claim in fresh],
                "locks": [locks.next(claim.level) for claim in fresh],
                "args": [
                    orjson.dumps({"tick_id": c.tick_id, "level": c.level, "slot": s}).decode()
                    for c, s in zip(fresh, slots, strict=True)
                ],
            },
        )
    return [claim.tick_id for claim in fresh]


def jobs_in(store: EventStore, statuses: Sequence[str]) -> list[JobTick]:
    """The tick jobs in `statuses` (todo, doing, …), oldest first."""
    with store.read_transaction() as conn:
        rows = conn.exec_driver_sql(
            "SELECT id, args->>'tick_id', args->>'level' FROM procrastinate_jobs "
            "WHERE task_name = %(task)s AND status::text = ANY(%(statuses)s) ORDER BY id",
            {"task": TASK, "statuses": list(statuses)},
        ).all()
    return [JobTick(tick_id, level, job_id) for job_id, tick_id, level in rows]


@dataclass(frozen=True)
class WorkerState:
    """A registered worker as `tickwork status` and the API show it."""

    worker_id: int
    host: str | None
    pid: int | None
    concurrency: int | None
    running: int
    last_heartbeat: datetime


def workers(store: EventStore, announced: int = 1000) -> list[WorkerState]:
    """The workers procrastinate knows (alive, or not yet pruned), with what they announced."""
    with store.read_transaction() as conn:
        rows = conn.exec_driver_sql(
            "SELECT w.id, w.last_heartbeat, count(j.id) FROM procrastinate_workers w "
            "LEFT JOIN procrastinate_jobs j ON j.worker_id = w.id AND j.status = 'doing' "
            "GROUP BY w.id ORDER BY w.id"
        ).all()
    starts = {e.data["worker_id"]: e.data for e in store.read_last(announced, ["WorkerStarted"])}
    return [
        WorkerState(
            worker_id,
            starts.get(worker_id, {}).get("host"),
            starts.get(worker_id, {}).get("pid"),
            starts.get(worker_id, {}).get("concurrency"),
            running,
            heartbeat,
        )
        for worker_id, heartbeat, running in rows
    ]


class _OnStore(Executor):
    """Both sides of the procrastinate executor: the jobs live in the store's database."""

    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        preparer: Preparer,
        runner: Runner,
        report: Report,
        ended: Ended | None = None,
    ) -> None:
        self.store = store
        super().__init__(settings, preparer, runner, report, ended)


class ProcrastinateExecutor(_OnStore):
    """`tickwork run`'s side: defers a job per claimed tick; workers on any host run them."""

    def _set_up(self) -> None:
        self.locks = Locks(self.settings)
        self.undelivered: list[SlotClaim] = []
        """Claims whose defer failed (store out): deferred again until it lands."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._redeliverer = threading.Thread(target=self._redeliver, daemon=True)

    def _submit(self, claim: SlotClaim) -> bool:
        if self._closed.is_set():
            return False
        try:
            defer(self.store, self.settings, self.locks, [claim])
        except StoreError as exc:
            self.report(f"{claim.tick_id} not deferred yet ({exc}): trying again")
            with self._lock:
                self.undelivered.append(claim)
                if self._redeliverer.ident is None:
                    self._redeliverer.start()
        return True

    def _redeliver(self) -> None:
        while not self._closed.wait(REDELIVER_SECONDS):
            with self._lock:
                waiting = list(self.undelivered)
            try:
                defer(self.store, self.settings, self.locks, waiting)
            except StoreError:
                continue
            with self._lock:
                del self.undelivered[: len(waiting)]

    def abandoned(self, tick_id: str, level: str) -> str | None:
        """A claim whose scheduler died is the outbox: its job is deferred if it has none.

        A panel member or hedge twin a worker claimed is part of that worker's job, not a
        job of its own: the sweeper ends it with the job's tick when the worker dies.
        """
        part = PART.fullmatch(tick_id)
        if part is not None:
            parent = self.store.read_stream(tick_stream(part.group(1)))
            if any(e.type == "TickTaken" for e in parent):
                return None
        scheduled = self.store.read_stream(tick_stream(tick_id), limit=1)
        slot = scheduled[0].data.get("slot") if scheduled else None
        claim = SlotClaim(tick_id, level, datetime.fromisoformat(slot) if slot else None)
        deferred = defer(self.store, self.settings, self.locks, [claim])
        return "deferred (its scheduler died before it could)" if deferred else None

    def claimer_gone(self, host: str, pid: int) -> bool:
        """Whether a scheduler of another host is gone: no connection of it lately active.

        None of its connections (`harness.store.process_name`) is open and was active in
        the last `stalled_seconds`. A live scheduler asks the store every half second; a
        lost host's connections linger on the server, idle, until its TCP keepalive gives
        up. Deferring is keyed by tick id, so a claim taken on too early runs once all the
        same; only a `buffer_one` tick its scheduler still holds back could start early.
        """
        with self.store.read_transaction() as conn:
            alive = conn.exec_driver_sql(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = "
                "%(name)s AND coalesce(state_change, backend_start) > "
                "now() - make_interval(secs => %(seconds)s))",
                {
                    "name": process_name(host, pid),
                    "seconds": self.settings.executor.stalled_seconds,
                },
            ).scalar()
        return not alive

    def running(self) -> list[RunningTick]:
        """The ticks some worker runs now."""
        return list(jobs_in(self.store, ["doing"]))

    def _withdraw(self, matches: Callable[[SlotClaim], bool]) -> list[SlotClaim]:
        """Cancel the matching queued jobs; only a job still `todo` is cancelled (atomically)."""
        withdrawn = []
        for job in jobs_in(self.store, ["todo"]):
            claim = SlotClaim(job.tick_id, job.level, None)
            if not matches(claim):
                continue
            with self.store.read_transaction() as conn:
                cancelled = conn.exec_driver_sql(
                    "SELECT procrastinate_cancel_job_v1(%(id)s, false, false)", {"id": job.job_id}
                ).scalar()
            if cancelled is not None:
                withdrawn.append(claim)
        return withdrawn

    def _cancel_running(self, tick_id: str, reason: str) -> bool:
        """Ask procrastinate to abort the tick's job; the worker running it kills its group.

        That worker also follows the control stream and stops the tick with the reason
        recorded there, which is usually first.
        """
        job = next((job for job in jobs_in(self.store, ["doing"]) if job.tick_id == tick_id), None)
        if job is None:
            return False
        with self.store.read_transaction() as conn:
            aborting = conn.exec_driver_sql(
                "SELECT procrastinate_cancel_job_v1(%(id)s, true, false)", {"id": job.job_id}
            ).scalar()
        return aborting is not None

    def adopt(self, started: StoredEvent, now: datetime) -> None:
        """Workers own the ticks they started; a dead one's ticks end by `sweep_stalled`."""

    def _watch(self, adoption: Adoption) -> None:
        raise NotImplementedError("the procrastinate executor adopts no worker")

    def _close(self) -> list[SlotClaim]:
        """Queued jobs stay queued: workers run them whether a scheduler runs or not."""
        self._closed.set()
        return []

    def _drain(self, grace: float) -> None:
        if self._redeliverer.ident is not None:
            self._redeliverer.join()

    def wait_idle(self, timeout: float) -> None:
        """Wait until no tick job is queued or running (for tests and callers of `fire`)."""
        deadline = time.monotonic() + timeout
        while jobs_in(self.store, ["todo", "doing"]) or self.undelivered:
            if time.monotonic() > deadline:
                raise TimeoutError(f"tick jobs still queued or running after {timeout} s")
            time.sleep(0.2)


def end_once(store: EventStore, end: TickEvent) -> bool:
    """Append a tick's terminal event unless it has one; False if it had.

    Appended at the version read, again after a concurrent append (the tick's own spend
    events), so of a worker and a sweeper ending one tick only the first end lands.
    """
    stream = tick_stream(end.tick_id)
    events = store.read_stream(stream)
    while not any(e.type in TERMINAL_TYPES for e in events):
        try:
            store.append(stream, [end.to_record()], events[-1].stream_position if events else ANY)
        except ConcurrencyError:
            events = store.read_stream(stream)
            continue
        return True
    return False


class WorkerRunner(Runner):
    """A worker's runner: a tick's end lands only if nobody ended it meanwhile.

    A sweeper ends the ticks of a worker whose heartbeat it missed; a worker that was only
    slow (a loaded host) must not add a second terminal event when its tick ends after all.
    """

    def record(self, event: TickEvent) -> None:
        """Tick events as the runner records them; a terminal one once per tick."""
        if event.type not in TERMINAL_TYPES or self.store is None:
            super().record(event)
            return
        try:
            end_once(self.store, event)
        except StoreError:
            super().record(event)  # spooled: the store is out, nobody can end it meanwhile


class SharedSpacing:
    """The infrastructure throttle (`[runner] infra_throttle_seconds`) across workers.

    Under the local executor one gate spaces every start after an infrastructure failure;
    a worker's queue is procrastinate's, and a throttle of its own would space one process
    of many. Here a failure on any worker spaces the starts of every worker by its
    backoff, for `infra_throttle_seconds`, through the `throttle` stream's last
    `StartsSpaced` (spacing, end, last start), appended at the version read.
    """

    def __init__(self, store: EventStore, duration: float) -> None:
        self.store = store
        self.duration = timedelta(seconds=duration)

    def failed(self, spacing: float) -> None:
        """An attempt failed on infrastructure: every start waits `spacing` from now on.

        A wider spacing or a later end in force is kept, as the local gate keeps it.
        """
        while True:
            version, state = self._read()
            now = utcnow()
            held = state if state is not None and state.until > now else None
            widened = StartsSpaced(
                spacing_seconds=max(spacing, held.spacing_seconds if held else 0.0),
                until=max(now + self.duration, held.until if held else now),
                last_start=max(now, held.last_start if held else now),
            )
            if self._append(widened, version):
                return

    def wait_turn(self, tick_id: str, closing: threading.Event) -> bool:
        """Wait until the tick may start here; False when `closing` is set first."""
        while True:
            version, state = self._read()
            now = utcnow()
            if state is None or state.until <= now:
                return True
            pause = (state.last_start - now).total_seconds() + state.spacing_seconds
            if pause > 0:
                if closing.wait(min(pause, (state.until - now).total_seconds())):
                    return False
                continue
            started = StartsSpaced(
                spacing_seconds=state.spacing_seconds,
                until=state.until,
                last_start=now,
                tick_id=tick_id,
            )
            if self._append(started, version):
                return True

    def _read(self) -> tuple[int, StartsSpaced | None]:
        version = self.store.stream_version(THROTTLE_STREAM)
        if not version:
            return 0, None
        last = self.store.read_stream(THROTTLE_STREAM, after=version - 1)[-1]
        return last.stream_position, StartsSpaced.model_validate(last.data)

    def _append(self, state: StartsSpaced, version: int) -> bool:
        """Append at `version`; False when another worker appended first."""
        try:
            self.store.append(THROTTLE_STREAM, [state.to_record()], version or NO_STREAM)
        except ConcurrencyError:
            return False
        return True


def places_needed(level: LevelConfig | None) -> int:
    """The tick processes one tick of `level` may run at once.

    Its panel's members (a replacement runs after them), and a hedge twin beside each
    when the level hedges.
    """
    if level is None:
        return 1
    return level.panel * (2 if level.hedge_after_seconds > 0 else 1)


class Reserved:
    """Where a worker's panel members and hedge twins start: in places their job took."""

    def enter(self, level: str, stopped: threading.Event) -> bool:
        """At once, unless the tick was stopped meanwhile."""
        return not stopped.is_set()

    def release(self, level: str) -> None:
        """Nothing: the places go back with the job's."""


class WorkerExecutor(_OnStore):
    """`tickwork worker`'s side: runs the ticks of the jobs it takes, here, to their end."""

    def _set_up(self) -> None:
        self.host = socket.gethostname()
        self.announced = False
        """Whether its WorkerStarted is recorded (once procrastinate registered it)."""
        self.closing = threading.Event()
        self.seat(DEFAULT_CONCURRENCY)
        self.spacing = SharedSpacing(self.store, self.settings.runner.infra_throttle_seconds)
        if self.settings.runner.infra_throttle_seconds > 0:
            self.runner.on_infrastructure_failure(self._failed_on_infrastructure)

    def seat(self, concurrency: int) -> None:
        """Places for `concurrency` ticks at once: jobs' ticks, panel members, hedge twins.

        procrastinate runs at most `--concurrency` jobs here, and a job's tick may run
        more tick processes than one: its panel's members, a twin for each. A job takes
        every place its tick may need before it starts (`places_needed`), at once, so no
        more tick processes run here than the worker's concurrency, and two jobs never
        hold part of what each needs while waiting for the rest. Its members and twins
        then start in those places (`Reserved`).
        """
        self.places: Gate[None] = Gate(concurrency, {})
        self.runner.places = Reserved()

    def _failed_on_infrastructure(self, spacing: float) -> None:
        try:
            self.spacing.failed(spacing)
        except StoreError as exc:
            self.report(f"the throttle of every worker is not widened (store out): {exc}")

    def announce(self, worker_id: int, concurrency: int, queues: list[str]) -> None:
        """Record the worker's host, pid and concurrency once procrastinate registered it."""
        started = WorkerStarted(
            worker_id=worker_id,
            host=self.host,
            pid=os.getpid(),
            concurrency=concurrency,
            queues=queues,
        )
        self.store.append(started.stream_id, [started.to_record()])
        self.announced = True

    def run_job(
        self, job_id: int, worker_id: int | None, tick_id: str, level: str, slot: str | None
    ) -> None:
        """Take the job's tick and run it to its end; a tick taken or ended already is left."""
        when = datetime.fromisoformat(slot) if slot else None
        if not self.take(job_id, worker_id, tick_id, level):
            return
        needed = places_needed(self.settings.levels.get(level))
        if not self.places.enter(level, self.closing, needed):
            self.runner.cancel_queued(tick_id, level, "worker stopped")
            return
        try:
            if self.spacing.wait_turn(tick_id, self.closing):
                self._execute(SlotClaim(tick_id, level, when))
            else:
                self.runner.cancel_queued(tick_id, level, "worker stopped")
        finally:
            self.places.release(level, needed)

    def take(self, job_id: int, worker_id: int | None, tick_id: str, level: str) -> bool:
        """Append TickTaken at the version read: False if the tick was taken or ended."""
        events = self.store.read_stream(tick_stream(tick_id))
        if not events or any(e.type in TERMINAL_TYPES or e.type in TAKEN for e in events):
            self.report(f"{tick_id} of job {job_id} taken or ended already: left as it is")
            return False
        taken = TickTaken(
            tick_id=tick_id,
            level=level,
            host=self.host,
            worker_pid=os.getpid(),
            job_id=job_id,
            worker_id=worker_id,
        )
        try:
            self.store.append(tick_stream(tick_id), [taken.to_record()], events[-1].stream_position)
        except ConcurrencyError:
            self.report(f"{tick_id} of job {job_id} was taken by another delivery")
            return False
        return True

    def sweep_stalled(self) -> None:
        """End the ticks of workers whose heartbeat stopped, once, and finish their jobs."""
        with self.store.read_transaction() as conn:
            rows = conn.exec_driver_sql(
                procrastinate_queries["select_stalled_jobs_by_heartbeat"],
                {
                    "seconds_since_heartbeat": self.settings.executor.stalled_seconds,
                    "queue": None,
                    "task_name": TASK,
                },
            ).mappings()
            stalled = [(row["id"], row["args"]) for row in rows]
        for job_id, args in stalled:
            self._end_stalled(job_id, args["tick_id"], args["level"])

    def _end_stalled(self, job_id: int, tick_id: str, level: str) -> None:
        events = self.store.read_stream(tick_stream(tick_id))
        if not any(e.type in TAKEN for e in events):
            self._job_sql(RETRY_JOB, job_id)
            self.report(f"{tick_id}: its worker died before taking it; job {job_id} retried")
            return
        for part, part_events in self._family(tick_id, level, events).items():
            ref = self._kill_here(part_events)
            if ref is not None:
                self.runner.book_cut_off_call(ref)
            lost = TickLost(tick_id=part, level=level, reason="its worker's heartbeat stopped")
            if end_once(self.store, lost):
                self.report(f"{part} lost (its worker's heartbeat stopped)")
        self._job_sql("SELECT procrastinate_finish_job_v1(%(id)s, 'failed', false)", job_id)

    def _family(
        self, tick_id: str, level: str, events: list[StoredEvent]
    ) -> dict[str, list[StoredEvent]]:
        """The job's tick and the panel members and hedge twin it ran, by tick id."""
        config = self.settings.levels.get(level)
        size = config.panel if config is not None else 1
        marks = [f"-p{i}" for i in range(1, size + 1)] + ["-p" + REPLACEMENT] if size > 1 else []
        parts = [tick_id + mark for mark in [*marks, TWIN_SUFFIX]]
        streams = self.store.read_streams([tick_stream(part) for part in parts])
        found = {part: streams[tick_stream(part)] for part in parts if streams[tick_stream(part)]}
        return {tick_id: events, **found}

    def _job_sql(self, statement: str, job_id: int) -> None:
        """Move a stalled job on; another sweeper that moved it first makes this a no-op."""
        try:
            with self.store.read_transaction() as conn:
                conn.exec_driver_sql(statement, {"id": job_id})
        except StoreError as exc:
            self.report(f"job {job_id} left as another sweeper moved it: {exc}")

    def _kill_here(self, events: list[StoredEvent]) -> TickRef | None:
        """Kill the group of the dead worker's tick process if it runs on this host.

        Returns the tick's ref once its group is gone, so the call its process may have
        had in flight can be booked: nothing of it can record any more. A tick started on
        another host is left alone (None): its process may still run and book its calls.
        """
        started = next((e for e in reversed(events) if e.type == "TickStarted"), None)
        if started is None or started.data.get("host") != self.host:
            return None
        group = TickProcess(int(started.data["pid"]))
        for pid in group.survivors():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + KILLED_GONE_SECONDS
        while group.survivors() and time.monotonic() < deadline:
            time.sleep(KILLED_POLL_SECONDS)
        return started_ref(started)

    def running(self) -> list[RunningTick]:
        """The ticks this worker runs now."""
        return list(self.runner.running())

    def _submit(self, claim: SlotClaim) -> bool:
        return False  # a worker's ticks come from jobs (`run_job`), never from a scheduler

    def _withdraw(self, matches: Callable[[SlotClaim], bool]) -> list[SlotClaim]:
        return []  # queued jobs are withdrawn by the scheduler; a job taken runs or is stopped

    def _cancel_running(self, tick_id: str, reason: str) -> bool:
        return self.runner.cancel(tick_id, reason)

    def _watch(self, adoption: Adoption) -> None:
        raise NotImplementedError("a worker adopts no tick: a dead worker's ticks are lost")

    def adopt(self, started: StoredEvent, now: datetime) -> None:
        """A dead worker's ticks end by `sweep_stalled`, not by adoption."""

    def _close(self) -> list[SlotClaim]:
        self.closing.set()  # a tick waiting out the throttle ends cancelled, never started
        return []

    def _drain(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        while self.runner.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        for ref in self.runner.running():
            self.runner.cancel(ref.tick_id, "worker stopped")
        while self.runner.running():
            time.sleep(0.1)

    def wait_idle(self, timeout: float) -> None:
        """Wait until no tick runs here."""
        deadline = time.monotonic() + timeout
        while self.runner.running():
            if time.monotonic() > deadline:
                raise TimeoutError(f"ticks still running after {timeout} s")
            time.sleep(0.1)
