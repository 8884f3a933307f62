"""Growth benchmark: every operator read path at two history sizes, and the ratio.

Invariant 14 says a read path costs what its window costs. This builds synthetic history
shaped like real ticks (issue 24's measurement of a real run: 13.6 events and 5.6 KB of
payload a tick, half of it transcript; 1,000 levels configured, each ticking every
minute, so the last hour holds 60,000 ticks whatever the size) at each size, on SQLite
and PostgreSQL, and prints each read path's p50 and the ratio of the larger size to the
smaller: a flat path stays near 1.

The history goes in through `history_loader`: closed ticks straight into their packed
`tick_rows` rows, open ones as events, in the layout the store's writer and compaction
leave, which `check_layout` checks against a tick the store appends and packs itself
(`--no-compaction` leaves every tick in `events`). Then `tickwork projections rebuild`
folds the read models (its time is a figure too). API paths run in-process through
FastAPI's TestClient, CLI paths as subprocesses (their time includes the interpreter's
start), reconcile's and start-up's queries as the service calls them. Disk per tick is
the hot store's size over its ticks. Each figure is printed as it is measured, with its
CPU (user + system) beside its wall clock: a run cut short keeps what it had.

    .venv/bin/python ops/bench/growth_bench.py [--sizes 1000000,10000000]
        [--backends sqlite,postgresql] [--pg-url postgresql://postgres@127.0.0.1:5432/test]
        [--pg-database bench_growth] [--keep FOLDER [--reuse [--as-is]]]
        [--runs 7] [--cli-runs 3] [--run-seconds 90] [--only-disk] [--no-compaction]

`--keep` keeps each size's store for a later run, which `--reuse` tops up to the present
minute (ten million events take several GB on disk). `--statements` prints each
in-process path's slowest statements and a plan. `--only-disk` stops after the disk
figure and prints where the bytes are: per table and index, and per event type (rows,
and bytes of their JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg
import sqlalchemy as sa
from fastapi.testclient import TestClient
from history_loader import LEVELS, PER_MINUTE, Span, _dsn, check_layout, load
from machine import describe, own_peak_mib, peak_rss, tree_peaks_mib
from sqlalchemy.engine import make_url
from store_bench import fresh_pg

from harness.api.app import create_app
from harness.config import load_settings
from harness.devtools.fake_llm import fake_upstream
from harness.devtools.upstream import env_for_ticks
from harness.execution.manual import ManualTicks
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.projections.ticks import last_slots, open_ticks
from harness.store import migrate_store, open_store
from harness.store.sql import SqlEventStore


def write_config(root: Path, url: str) -> Path:
    """1,000 levels every minute, on `url`."""
    levels = "".join(
        f'[levels.{level}]\nevery = "1m"\nmodel = "gpt-4o-mini"\nprompt = "Check."\n'
        for level in LEVELS
    )
    config = root / "tickwork.toml"
    config.write_text(
        f'[store]\nurl = "{url}"\n[paths]\nresults = "{root}/results"\nspool = "{root}/spool"\n'
        f'digests = "{root}/digests"\n\n{levels}'
    )
    return config


def disk_bytes(url: str) -> int:
    """The hot store's size: the database file and its WAL, or the PostgreSQL database."""
    if url.startswith("sqlite"):
        path = Path(make_url(url).database or "")
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    with psycopg.connect(_dsn(url)) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        assert size is not None
        return int(size[0])


def dead_tuples(url: str) -> int:
    """Dead rows left in the store's tables, counted by `pgstattuple` (the load left none).

    Each table the statistics say holds any is counted and printed with both figures: a
    rebuild should swap, truncate or vacuum, not leave deletes behind. The statistics
    alone overcount: a backend's updates reach them up to a second after it made them, so
    a VACUUM that removed them can be followed by their report (a rebuild's `spend_daily`
    read 68 dead rows where `pgstattuple` found none).
    """
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        found = conn.execute(
            "SELECT relname, n_dead_tup, (pgstattuple(relid)).dead_tuple_count "
            "FROM pg_stat_user_tables WHERE n_dead_tup > 0 ORDER BY n_dead_tup DESC"
        ).fetchall()
    for table, counted, dead in found:
        print(f"    dead tuples in {table}: {dead:,} ({counted:,} by the statistics)")
    return sum(dead for _, _, dead in found)


def print_breakdown(url: str, ticks: int) -> None:
    """Bytes per tick of each table and index, then rows and JSON bytes per event type."""
    if url.startswith("sqlite"):
        path = make_url(url).database
        assert path is not None
        with sqlite3.connect(path) as conn:
            sizes = conn.execute(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            ).fetchall()
            kinds = conn.execute(
                "SELECT type, count(*), sum(length(data) + length(metadata)) FROM events "
                "GROUP BY type ORDER BY 3 DESC"
            ).fetchall()
    else:
        with psycopg.connect(_dsn(url)) as conn:
            sizes = conn.execute(
                "SELECT relname, pg_relation_size(oid) + "
                "coalesce(pg_relation_size(nullif(reltoastrelid, 0)), 0) FROM pg_class "
                "WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'i') "
                "ORDER BY 2 DESC"
            ).fetchall()
            kinds = conn.execute(
                "SELECT type, count(*), sum(pg_column_size(data) + pg_column_size(metadata)) "
                "FROM events GROUP BY type ORDER BY 3 DESC"
            ).fetchall()
    print(f"    {'table or index':<40}{'B/tick':>9}")
    for name, size in sizes:
        if size and size / ticks >= 1:
            print(f"    {name:<40}{size / ticks:>9,.0f}")
    print(f"    {'event type':<40}{'rows/tick':>9}{'JSON B/tick':>12}")
    for kind, rows, size in kinds:
        print(f"    {kind:<40}{rows / ticks:>9.2f}{size / ticks:>12,.0f}")


# --- timing ---------------------------------------------------------------------------


def p50(runs: int, call: Callable[[], object]) -> tuple[float, float]:
    """Median seconds of `runs` calls after one unmeasured warm-up: wall clock, and CPU.

    CPU is this process's (every thread: the API's server thread too) and its waited-for
    children's (a CLI run), user and system: on a machine other work shares, what the path
    itself cost, where the wall clock also counts the time it waited for a core.
    """
    call()
    walls, cpus = [], []
    for _ in range(runs):
        began, spent = time.perf_counter(), cpu_seconds()
        call()
        walls.append(time.perf_counter() - began)
        cpus.append(cpu_seconds() - spent)
    return statistics.median(walls), statistics.median(cpus)


def cpu_seconds() -> float:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


STATEMENTS_SHOWN = 3


def print_statements(store: SqlEventStore, label: str, call: Callable[[], object]) -> None:
    """The statements one call of an in-process path sends, slowest first, and a plan.

    The slowest query's plan (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL, with
    the parameters it was sent with) says where a path that grows spends.
    """
    spent: dict[str, list[float]] = {}
    sent: dict[str, Any] = {}

    def before(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        conn.info.setdefault("began", []).append(time.perf_counter())

    def after(conn: sa.Connection, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        spent.setdefault(statement, []).append(time.perf_counter() - conn.info["began"].pop())
        sent[statement] = parameters

    sa.event.listen(store.engine, "before_cursor_execute", before)
    sa.event.listen(store.engine, "after_cursor_execute", after)
    try:
        call()
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", before)
        sa.event.remove(store.engine, "after_cursor_execute", after)
    slowest = sorted(spent.items(), key=lambda item: -sum(item[1]))[:STATEMENTS_SHOWN]
    print(f"    {label}: {sum(map(len, spent.values()))} statements", flush=True)
    for statement, seconds in slowest:
        flat = " ".join(statement.split())
        print(f"      {sum(seconds) * 1000:9.1f} ms in {len(seconds):>4} x  {flat[:600]}")
    queries = [q for q, _ in slowest if q.lstrip().upper().startswith(("SELECT", "WITH"))]
    if not queries:
        return
    statement = queries[0]
    explain = "EXPLAIN QUERY PLAN " if store.engine.dialect.name == "sqlite" else "EXPLAIN "
    with store.read_transaction() as conn:
        plan = conn.exec_driver_sql(explain + statement, sent[statement]).all()
    for row in plan:
        print(f"        {str(row[-1])[:300]}")


def cli(config: Path, *arguments: str) -> Callable[[], object]:
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config), *arguments]

    def run() -> object:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(arguments)} failed: {done.stderr.strip()[-2000:]}")
        return done

    return run


def peak_rss_mib(config: Path, *arguments: str) -> float:
    """Peak RSS of one CLI run (`own_peak_mib`)."""
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config), *arguments]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = own_peak_mib(child)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(arguments)} exited {child.returncode}")
    return peak


def rebuild_peaks_mib(config: Path) -> tuple[float, float]:
    """`tickwork projections rebuild`: its own peak RSS, and its and its fold workers' (MiB)."""
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config)]
    # A file, not a pipe: its progress, unread until it ends, would fill a pipe and stall it.
    with tempfile.TemporaryFile() as said:
        child = subprocess.Popen(
            [*command, "projections", "rebuild"], stdout=subprocess.DEVNULL, stderr=said
        )
        peaks = tree_peaks_mib(child)
        if child.returncode != 0:
            said.seek(0)
            raise RuntimeError(f"rebuild failed: {said.read().decode()[-2000:]}")
    return peaks


def run_rss_mib(config: Path, seconds: int) -> float:
    """Peak RSS of `tickwork run` on the history (ticks not included), sampled twice a second."""
    command = [str(Path(sys.executable).with_name("tickwork")), "-c", str(config), "run"]
    with fake_upstream() as fake, tempfile.TemporaryFile("w+") as said:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
        env["OPENAI_BASE_URL"] = fake.url
        service = subprocess.Popen(command, env=env, stdout=said, stderr=subprocess.STDOUT)
        peak = peak_rss(service, seconds)
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            print(f"    tickwork run still ran {STOP_SECONDS} s after SIGTERM: killed", flush=True)
            service.kill()
            service.wait()
            said.seek(0)
            print("    its last lines:", *said.read().splitlines()[-STOP_LINES:], sep="\n      ")
    return peak / 2**20


STOP_SECONDS = 120
STOP_LINES = 30
"""What the service printed last, shown when it would not stop."""


class Figures(dict[str, float]):
    """A size's figures, each printed as it is measured: a run cut short keeps what it had."""

    def __setitem__(self, label: str, value: float) -> None:
        super().__setitem__(label, value)
        print(f"    {label:<40}{value if '(' in label else value * 1000:>11,.1f}", flush=True)


TOP_UP_MINUTES = 65
"""A reused store gets at most this much new history: the windows read (the last hour)
full, and a gap before them, rather than the whole time since it was kept."""


def measure(url: str, size: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    """Load `size` events into the store at `url` (or top a kept one up) and time every path.

    A kept store (`--keep`) has its history in `root/history.json`; reused (`--reuse`),
    it gets the whole minutes since its end (the last TOP_UP_MINUTES of them, after a
    gap), so the last hour is as full as a fresh load's, and its read models catch up
    instead of being rebuilt (no rebuild figure).
    """
    figures = Figures()
    packing = not args.no_compaction
    marker = root / "history.json"
    kept = orjson.loads(marker.read_bytes()) if args.reuse and marker.exists() else None
    config = write_config(root, url)
    if kept is None:
        span = Span.of_events(size, datetime.now(UTC))
    else:
        if kept["packing"] != packing:
            raise SystemExit(f"{marker}: kept with packing={kept['packing']}, not this run")
        end = datetime.fromisoformat(kept["end"])
        gap = 0 if args.as_is else (datetime.now(UTC) - end) // timedelta(minutes=1)
        added = min(gap, TOP_UP_MINUTES) * PER_MINUTE
        span = Span(end + timedelta(minutes=gap), added, kept["ticks"])
    began, spent = time.perf_counter(), cpu_seconds()
    hot, packed = load(url, span, packing)
    wall, cpu = time.perf_counter() - began, cpu_seconds() - spent
    print(
        f"  {size:,} events{' (kept, topped up)' if kept else ''}: {span.ticks:,} ticks "
        f"loaded in {wall:.0f} s, CPU {cpu:.0f} s ({(hot + packed) / max(cpu, 1e-9):,.0f} "
        f"records a CPU second), {hot:,} records in `events`, {packed:,} in tick rows, "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    ticks = span.ticks + (kept["ticks"] if kept else 0)
    if args.keep:
        marker.write_bytes(
            orjson.dumps({"end": span.end.isoformat(), "ticks": ticks, "packing": packing})
        )
    began, spent = time.perf_counter(), cpu_seconds()
    if kept is None:
        with contextlib.closing(open_store(url)) as store:
            check_layout(store, packing)
        own, tree = rebuild_peaks_mib(config)
        figures["projections rebuild (s)"] = time.perf_counter() - began
        figures["projections rebuild CPU (s)"] = cpu_seconds() - spent
        figures["projections rebuild peak RSS (MiB)"] = own
        figures["rebuild + fold workers peak RSS (MiB)"] = tree
    else:
        with contextlib.closing(open_store(url)) as store:
            projector = projector_for(store, PriceBook(load_settings(config).prices))
            projector.catch_up()
            print(f"  read models caught up in {time.perf_counter() - began:.0f} s", flush=True)
            check_layout(store, packing, before_packing=projector.catch_up)
    if not url.startswith("sqlite"):
        if kept is None:
            figures["dead tuples after rebuild (rows)"] = dead_tuples(url)
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
    figures["disk per tick (KB)"] = disk_bytes(url) / ticks / 1000
    if args.only_disk:
        print_breakdown(url, ticks)
        return figures

    def timed(label: str, seconds: tuple[float, float]) -> None:
        figures[label], figures[f"{label} [CPU]"] = seconds

    def in_process(label: str, call: Callable[[], object]) -> None:
        timed(label, p50(args.runs, call))
        if args.statements:
            print_statements(store, label, call)

    settings = load_settings(config)
    store = open_store(url)
    recent = f"{LEVELS[7]}-{span.end - timedelta(minutes=2, seconds=30):%Y%m%dT%H%M%S}"
    # The read paths only: the run-now button's owner starts no tick here.
    manual = ManualTicks(settings, store, upstream=lambda: env_for_ticks(print), router=None)
    with TestClient(create_app(settings, store, manual)) as client:
        for label, path in (
            ("GET /dashboard/panels", "/dashboard/panels"),
            ("GET /metrics", "/metrics"),
            ("GET /ticks", "/ticks"),
            ("GET /ticks?level=", f"/ticks?level={LEVELS[500]}"),
            ("GET /status", "/status"),
        ):
            in_process(label, lambda path=path: client.get(path).raise_for_status())
        shown = client.get("/ticks", params={"level": LEVELS[7], "limit": 3}).json()
    projector = projector_for(store, PriceBook(settings.prices))

    def reconcile() -> object:
        projector.catch_up(["ticks"])
        return open_ticks(store)

    def start_up() -> object:
        projector.catch_up(["ticks"])
        return last_slots(store, LEVELS)

    in_process("reconcile: open ticks", reconcile)
    in_process("start-up: last slots of 1,000 levels", start_up)
    store.close()
    tick_id = shown[-1]["tick_id"] if shown else recent
    if args.cli_runs:
        for label, arguments in (
            ("tickwork status", ("status",)),
            ("tickwork show", ("show", tick_id)),
            ("tickwork digest --since 1h", ("digest", "--since", "1h")),
            ("tickwork events --since 1h", ("events", "--since", "1h")),
        ):
            timed(label, p50(args.cli_runs, cli(config, *arguments)))
        figures["digest --since 1h peak RSS (MiB)"] = peak_rss_mib(
            config, "digest", "--since", "1h"
        )
    if args.run_seconds:
        figures["tickwork run peak RSS (MiB)"] = run_rss_mib(config, args.run_seconds)
    return figures


def store_for(backend: str, size: int, root: Path, args: argparse.Namespace) -> str:
    """The store of one size: a SQLite file in `root`, or a PostgreSQL database.

    At head, and empty unless a kept one is reused: `--keep` names the PostgreSQL
    database after the size, so each size's store outlives the run.
    """
    database = f"{args.pg_database}_{size}" if args.keep else args.pg_database
    if not (args.reuse and (root / "history.json").exists()):
        for stale in [root / "history.json", *root.glob("events.db*")]:
            stale.unlink(missing_ok=True)
        return fresh_store(backend, root, args.pg_url, database)
    url = f"sqlite:///{root}/events.db" if backend == "sqlite" else _pg_url(args.pg_url, database)
    migrate_store(url)
    return url


def fresh_store(backend: str, root: Path, pg_url: str, pg_database: str) -> str:
    """An empty store at head: a SQLite file in `root`, or a PostgreSQL database made afresh."""
    url = f"sqlite:///{root}/events.db" if backend == "sqlite" else fresh_pg(pg_url, pg_database)
    migrate_store(url)
    return url


def _pg_url(admin: str, database: str) -> str:
    return (
        make_url(admin)
        .set(drivername="postgresql+psycopg", database=database)
        .render_as_string(hide_password=False)
    )


def drop_pg(admin: str, database: str) -> None:
    """Drop a database the run made and does not keep: 10M events take ~10 GB."""
    with psycopg.connect(_dsn(admin), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@contextmanager
def folder_for(backend: str, size: int, keep: str | None) -> Iterator[Path]:
    """Where a size's store and its config live: kept under `keep`, or a temporary folder."""
    if keep:
        root = Path(keep) / f"{backend}-{size}"
        root.mkdir(parents=True, exist_ok=True)
        yield root
        return
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


def report(backend: str, sizes: list[int], results: list[dict[str, float]]) -> None:
    small, large = (results[sizes.index(pick(sizes))] for pick in (min, max))
    head = "".join(f"{size:>14,}" for size in sizes)
    print(f"\n{backend}: p50 at each size (events), and the ratio of the largest to the smallest")
    print(f"  {'path':<40}{head}{'ratio':>9}")
    for label in dict.fromkeys(label for result in results for label in result):
        unit = "" if "(" in label else " ms"
        scale = 1 if "(" in label else 1000
        values = "".join(
            f"{result[label] * scale:>11,.1f}{unit or '   '}" if label in result else f"{'-':>14}"
            for result in results
        )
        ratio = f"{large[label] / small[label]:>8.2f}x" if label in small and label in large else ""
        print(f"  {label:<40}{values}{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="1000000,10000000",
        help="events, comma-separated, loaded in this order (the largest first: its figures "
        "are printed first if the run is cut short)",
    )
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--pg-database",
        default="bench_growth",
        help="the database made afresh (dropped first): one per run sharing the server",
    )
    parser.add_argument("--runs", type=int, default=7, help="runs of each in-process path")
    parser.add_argument(
        "--cli-runs", type=int, default=3, help="runs of each CLI path (0: none, no digest RSS)"
    )
    parser.add_argument(
        "--no-compaction",
        action="store_true",
        help="leave closed ticks in `events`, as before they had a form of their own",
    )
    parser.add_argument(
        "--only-disk", action="store_true", help="stop at disk per tick, with its breakdown"
    )
    parser.add_argument(
        "--run-seconds", type=int, default=90, help="how long `tickwork run` runs (0: not)"
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="print each in-process path's slowest statements and the slowest one's plan",
    )
    parser.add_argument(
        "--keep",
        metavar="FOLDER",
        help="keep each size's store: SQLite in FOLDER/<backend>-<size>/, PostgreSQL in "
        "database <pg-database>_<size>; without it both are deleted at the end",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: top a kept store up to now instead of loading it afresh",
    )
    parser.add_argument(
        "--as-is",
        action="store_true",
        help="with --reuse: add no history (a 10M top-up is minutes of load and fold on a "
        "busy machine); the windows read (the last hour) hold what the store's end left",
    )
    args = parser.parse_args()
    if args.reuse and not args.keep:
        parser.error("--reuse needs --keep")
    if args.as_is and not args.reuse:
        parser.error("--as-is needs --reuse")
    sizes = [int(size) for size in args.sizes.split(",")]

    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    print(f"sizes: {', '.join(f'{size:,}' for size in sizes)} events; {len(LEVELS):,} levels")
    for backend in args.backends.split(","):
        print(f"\n{backend}:", flush=True)
        results = []
        for size in sizes:
            with folder_for(backend, size, args.keep) as root:
                url = store_for(backend, size, root, args)
                try:
                    results.append(measure(url, size, args, root))
                finally:
                    if backend == "postgresql" and not args.keep:
                        drop_pg(args.pg_url, args.pg_database)
        report(backend, sizes, results)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
