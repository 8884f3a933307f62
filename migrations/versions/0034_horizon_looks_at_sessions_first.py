"""PostgreSQL: the readers' horizon takes its fresh snapshot after it has looked at the sessions.

`tickwork_events_horizon(seen)` (migration 0005) passes over an id of the caller's
snapshot that is no writer's. An id whose session no longer runs it has ended, and is
passed over if a fresh snapshot shows it ended and no event in its range. 0005 did both
looks in one statement, whose snapshot PostgreSQL takes when the statement starts, before
it reads the sessions. A transaction that ended between the two (any short transaction of
the cluster, in any database) was gone from the sessions yet still in progress in the
"fresh" snapshot, so it counted as a writer and hid every event appended after it began:
an append could be missing from the read that followed it. Measured on this machine with
six sessions of another database committing one-row inserts in a loop: 155 of 3,000
append-then-read pairs missed the append (`tests/test_store_concurrency.py` holds the
case).

Now the function looks at the sessions in one statement and checks the ids left in the
next, whose snapshot (in READ COMMITTED, where the store reads) is taken after the look,
so an id gone from the sessions has ended in it. In REPEATABLE READ the second statement
keeps the transaction's snapshot, in which such an id is still in progress: it counts as a
writer, which only delays the reader, as before.

It also passes over, before looking at any session, an id whose positions lie above the
newest event (read in the function's first statement, whose snapshot holds all the caller
sees): no event the caller reads lies above it, so capping there would change nothing.
When every transaction in progress began after the newest event committed, as between
two bursts of appends, no session is looked at: the look (`pg_stat_get_activity`) costs
several times the rest of a one-row read's work on the server.

The downgrade puts 0005's function back.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-06
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

HORIZON = """
CREATE OR REPLACE FUNCTION tickwork_events_horizon(seen pg_snapshot) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    newest bigint;
    unexplained xid8[];
BEGIN
    IF pg_snapshot_xmin(seen) = pg_snapshot_xmax(seen) THEN
        RETURN 9223372036854775807;  -- nothing in progress
    END IF;
    newest := (SELECT max(global_position) FROM events);
    SELECT array_agg(x) INTO unexplained
    FROM pg_snapshot_xip(seen) AS x
    WHERE x::text::bigint << 20 <= newest
        AND NOT EXISTS (
            SELECT FROM pg_stat_get_activity(NULL) AS a
            WHERE a.backend_xid = x::xid
                AND (a.application_name IS DISTINCT FROM 'tickwork-writer'
                    OR a.datid IS DISTINCT FROM (
                        SELECT oid FROM pg_database WHERE datname = current_database()))
        );
    IF unexplained IS NULL THEN
        RETURN 9223372036854775807;  -- every id in progress is another's, or above the newest
    END IF;
    -- A new statement: its snapshot is taken after the look at the sessions above.
    RETURN (
        SELECT COALESCE(min(x::text::bigint) << 20, 9223372036854775807)
        FROM unnest(unexplained) AS x
        WHERE NOT (
            pg_visible_in_snapshot(x, pg_current_snapshot())
            AND NOT EXISTS (
                SELECT FROM events
                WHERE global_position >= x::text::bigint << 20
                    AND global_position < (x::text::bigint + 1) << 20
            )
        )
    );
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(HORIZON)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(importlib.import_module("migrations.versions.0005_positions_from_xids").HORIZON)
