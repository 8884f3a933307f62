"""The parts of a store URL the configuration checks, read as SQLAlchemy's `make_url` reads them.

The configuration checks the URL's backend and takes its password to redact; importing
SQLAlchemy for that cost a command that never opens the store (a status the running
service answers, `tickwork levels` on a file) most of its start. The pattern and the
unquoting are `sqlalchemy.engine.url._parse_url`'s, so a URL this accepts is one the
store can open; `tests/test_config.py` holds the two to the same answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

_URL = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
        """,
    re.X,
)


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """`backend`: the dialect before any `+driver` (`postgresql` of `postgresql+psycopg`)."""

    backend: str
    password: str | None


def parse_store_url(url: str) -> StoreUrl:
    """The URL's backend and password (unquoted), or ValueError where `make_url` raises.

    Raises:
        ValueError: not a URL by SQLAlchemy's pattern, or its port is not a number.
    """
    found = _URL.match(url)
    if found is None:
        raise ValueError("not a database URL by SQLAlchemy's pattern")
    if found["port"] is not None:
        int(found["port"])  # an empty port too: SQLAlchemy's URL takes only a number
    password = found["password"]
    return StoreUrl(
        backend=found["name"].split("+")[0],
        password=None if password is None else unquote(password),
    )
