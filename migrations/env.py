"""Alembic environment: migrates the connection `harness.store.migrate` hands over.

The schema is owned by these versions alone; they never import the application's tables,
so an old revision keeps meaning what it meant when it was written.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `tickwork migrate`, which supplies the connection")

context.configure(connection=connection, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
