"""The event store: an append-only log in SQLite (embedded default) or PostgreSQL.

It owns the contract every backend keeps (`EventStore`, with the projections' tracking),
its one SQL implementation, the schema and its migrations, and the spool that holds
events while the store is out of reach. It is the only place with SQL on `events`; read
models keep their own tables in the same database, defined on `harness.store.schema`'s
metadata and written with `upsert`. It also owns the archives of days the hot store has
shed, and what retention keeps, compacts and reclaims. procrastinate's jobs live in its
database too: their schema and every query on them are the store's, which the procrastinate
executor asks by name: no part but the store and its read models takes a connection.

Every name of its own is loaded on first use (`harness.fronts`): the archives and
retention serve only the commands that ask for them.
"""

from __future__ import annotations

import typing

from harness import fronts
from harness.contracts import Durability, NewEvent, StoredEvent

if typing.TYPE_CHECKING:
    from harness.store.archives import (
        EVENTS_FILE,
        FILES_FILE,
        INDEX_FILE,
        MANIFEST_FILE,
        TRANSCRIPTS_FILE,
        TRANSCRIPTS_INDEX,
        TRANSCRIPTS_MANIFEST,
        Archive,
        ArchiveError,
        Line,
        Manifest,
        day_folder,
        find_archived,
        read_events,
        read_fields,
        read_lines,
        read_transcript,
        recorded_archives,
        verify,
        verify_as_recorded,
        verify_transcripts,
        write_archive,
        write_transcripts,
    )
    from harness.store.base import EventStore, Tracking
    from harness.store.engine import (
        DRIVER_PRELOAD,
        conninfo,
        is_postgresql,
        load_postgresql_driver,
        process_name,
        safe_url,
        split_password,
    )
    from harness.store.heartbeats import Beat, Heartbeat, beats
    from harness.store.merging import merged
    from harness.store.migrate import current_revision
    from harness.store.opening import (
        configured_store,
        migrate_store,
        open_store,
        store_revision,
    )
    from harness.store.partitions import PartitionHeld, partitioned, prepare_partitions
    from harness.store.procrastinate_jobs import (
        JobWorker,
        cancel_job,
        defer_once,
        fail_job,
        job_workers,
        list_jobs,
        retry_job,
        stalled_jobs,
    )
    from harness.store.procrastinate_schema import (
        PROCRASTINATE_MIGRATIONS,
        apply_procrastinate_schema,
    )
    from harness.store.rate_buckets import Call, Turn, block, release_tick, settle, take
    from harness.store.records import (
        ANY,
        NO_STREAM,
        AppendResult,
        ConcurrencyError,
        EventData,
        EventIdConflictError,
        ExpectedVersion,
        SchemaError,
        StoreError,
        StoreUnavailableError,
        Window,
    )
    from harness.store.retention import (
        Footprint,
        LeavingDay,
        closed_ticks,
        convert_to_incremental_vacuum,
        day_lines,
        day_range,
        delete_events,
        drop_emptied_days,
        first_tick_day_after,
        footprint,
        holds,
        lagging_checkpoints,
        leave_day,
        oldest_tick_record,
        reclaim_space,
        recorded_after,
    )
    from harness.store.schema import HEAD_REVISION, Json, metadata, projection_checkpoints
    from harness.store.scratch import scratch_sqlite
    from harness.store.sessions import recently_connected
    from harness.store.sizing import (
        API_THREADS,
        run_connections,
        serve_connections,
        worker_connections,
    )
    from harness.store.spool import Spool, append_or_spool
    from harness.store.sql import SqlEventStore, add_sums, among, clear_tables, upsert
    from harness.store.tick_rows import (
        PAGE,
        archived_on,
        compact,
        drop_archived,
        forget,
        hot_days,
        hot_transcripts,
        positions_kept,
        relied_on,
    )

__getattr__, __all__ = fronts.declared(__name__)
