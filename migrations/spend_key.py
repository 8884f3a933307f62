"""A column joining `spend_daily`'s primary key, or leaving it: migrations 0009, 0029, 0031, 0033.

The key of the spend read model grew four times (the prompt template, the catalog
target, the price source, the billing), each time the same way: the column added with
the value a rebuild gives the rows folded before, and the primary key made again; a
downgrade adds up each key's rows across the column's values before dropping it, so no
token is lost.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

FIRST_KEY = ["level", "model", "day", "price_tier"]
SUMS = [
    "prompt_tokens",
    "completion_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "model_calls",
    "estimated_calls",
]
LENGTHS = {"price_source": 100, "billing": 16}
"""The key columns longer or shorter than 64 characters, as their revisions added them."""
PRIMARY_KEY = "spend_daily_pkey"
"""PostgreSQL's name for the table's primary key (SQLite's has none: the table is copied)."""


def add_to_key(
    column: str,
    key: list[str],
    before: list[str],
    length: int = 64,
    value: str = "",
    sums: Sequence[str] = (),
) -> None:
    """Add `column` (a string, `value` for existing rows) to spend_daily and to its key `key`.

    `before`: the string columns beyond FIRST_KEY and SUMS the table has before the
    change; `sums`: its integer sums beyond SUMS.
    """
    added = sa.Column(column, sa.String(length), nullable=False, server_default=value)
    _rekey(before, key, added=added, sums=sums)
    with op.batch_alter_table("spend_daily") as batch:
        batch.alter_column(column, existing_type=sa.String(length), server_default=None)


def drop_from_key(column: str, key: list[str], before: list[str], sums: Sequence[str] = ()) -> None:
    """Drop `column` from spend_daily, its rows added up per `key` (the key without it).

    `before`: the string columns beyond FIRST_KEY and SUMS the table has before the
    change; `sums`: its integer sums beyond SUMS, added up too.
    """
    every = [*SUMS, *sums]
    keys, summed = ", ".join(key), ", ".join(f"sum({name}) AS {name}" for name in every)
    op.execute(
        f"CREATE TABLE spend_daily_merged AS SELECT {keys}, {summed} "
        f"FROM spend_daily GROUP BY {keys}"
    )
    op.execute("DELETE FROM spend_daily")
    _rekey(before, key, dropped=column, sums=sums)
    columns = ", ".join([*key, *every])
    op.execute(f"INSERT INTO spend_daily ({columns}) SELECT {columns} FROM spend_daily_merged")
    op.drop_table("spend_daily_merged")


def _rekey(
    before: list[str],
    key: list[str],
    added: sa.Column[str] | None = None,
    dropped: str = "",
    sums: Sequence[str] = (),
) -> None:
    """Add or drop a column of spend_daily and make `key` its primary key.

    SQLite copies the table, from its definition given without a primary key, so that the
    copy's is `key` alone.
    """
    if op.get_bind().dialect.name == "postgresql":
        copy_from = None
    else:
        columns = [
            sa.Column("level", sa.String(100), nullable=False),
            sa.Column("model", sa.String(200), nullable=False),
            sa.Column("day", sa.Date(), nullable=False),
            sa.Column("price_tier", sa.BigInteger(), nullable=False),
            *(sa.Column(name, sa.BigInteger(), nullable=False) for name in SUMS),
            *(sa.Column(name, sa.String(LENGTHS.get(name, 64)), nullable=False) for name in before),
            *(sa.Column(name, sa.BigInteger(), nullable=False) for name in sums),
        ]
        index = sa.Index("ix_spend_daily_day", "day")
        copy_from = sa.Table("spend_daily", sa.MetaData(), *columns, index)
    with op.batch_alter_table("spend_daily", copy_from=copy_from) as batch:
        if copy_from is None:
            batch.drop_constraint(PRIMARY_KEY, type_="primary")
        if added is not None:
            batch.add_column(added)
        if dropped:
            batch.drop_column(dropped)
        batch.create_primary_key(PRIMARY_KEY, key)
