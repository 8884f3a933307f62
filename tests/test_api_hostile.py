"""Every API input, generated: a clear 4xx, never a 5xx, and a rejected one changes nothing.

Hypothesis drives each query parameter with arbitrary text; tests/test_api_fuzz.py drives
every operation of the OpenAPI schema with what the schema allows and what it does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.contracts.events import TickCompleted, TickStarted
from harness.store import SqlEventStore, open_store
from tests.api_support import serving, settings_for

EXAMPLES = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
"""Bounded so that the whole suite stays within its few minutes."""

text = st.text(max_size=30) | st.from_regex(r"-?[0-9]{1,25}[smhdw]?", fullmatch=True)


@pytest.fixture(scope="module")
def opened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SqlEventStore, Path]]:
    folder = tmp_path_factory.mktemp("api-hostile")
    store = open_store(f"sqlite:///{folder}/events.db")
    try:
        yield store, folder
    finally:
        store.close()


@pytest.fixture(scope="module")
def http(opened: tuple[SqlEventStore, Path]) -> Iterator[httpx.Client]:
    store, folder = opened
    with serving(settings_for(str(store.engine.url), folder), store) as client:
        yield client


@EXAMPLES
@given(
    path=st.sampled_from(["/ticks", "/spend", "/status", "/digests/latest"]),
    name=st.sampled_from(["since", "level", "status", "limit", "by"]),
    values=st.lists(text, min_size=1, max_size=3),
)
@example(path="/ticks", name="since", values=["1000000d"])
@example(path="/spend", name="since", values=["99999999999999999999d"])
def test_no_query_parameter_gets_a_5xx(
    http: httpx.Client, path: str, name: str, values: list[str]
) -> None:
    answer = http.get(path, params=[(name, value) for value in values])
    assert answer.status_code < 500, answer.text
    if answer.status_code == 422:
        assert answer.json()["detail"][0]["loc"][:2] == ["query", name], answer.text


@EXAMPLES
@given(
    level=text,
    action=text,
    scope=text,
)
def test_a_rejected_control_request_stores_nothing(
    http: httpx.Client, opened: tuple[SqlEventStore, Path], level: str, action: str, scope: str
) -> None:
    store, _ = opened
    before = store.last_position()
    level, action, scope = (quote(part, safe="") for part in (level, action, scope))
    for path in (f"/levels/{level}/{action}", f"/ticks/{scope}"):
        answer = http.request("POST" if path.startswith("/levels") else "GET", path)
        assert answer.status_code < 500, answer.text
        if answer.status_code >= 400:
            assert store.last_position() == before


def test_a_streams_offsets_are_bounded_and_one_past_the_end_ends_it_at_once(
    tmp_path: Path, http: httpx.Client, opened: tuple[SqlEventStore, Path]
) -> None:
    """Bounds in the schema, and what the largest values do.

    A huge log offset crashed the stream mid-answer; an event position past the end of an
    ended tick kept it open for ever.
    """
    store, _ = opened
    log = tmp_path / "tick.log"
    log.write_text("worker started\n")
    tick_id = f"min-ended-{tmp_path.name}"
    events = [
        TickStarted(tick_id=tick_id, level="min", pid=1, host="h", log_path=str(log)),
        TickCompleted(tick_id=tick_id, level="min"),
    ]
    store.append(f"tick-{tick_id}", [event.to_record() for event in events])
    stream = f"/ticks/{tick_id}/stream"
    for name in ("log_from", "after"):
        refused = http.get(stream, params={name: 2**64})
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["query", name]
    largest = http.get(stream, params={"log_from": 2**63 - 1})
    assert largest.status_code == 200 and "event: end" in largest.text
    assert "worker started" not in largest.text, "an offset past the log's end reads nothing"
    past = http.get(stream, params={"after": 2**63 - 1})
    assert past.status_code == 200 and "event: end" in past.text, past.text
    assert "event: story" not in past.text, "the client knows every event up to `after`"


@pytest.mark.parametrize(
    ("method", "path", "loc"),
    [
        ("GET", "/ticks/a%00b", ["path"]),
        ("POST", "/cancel/a%00b", ["path"]),
        ("DELETE", "/cancel/a%00b", ["path"]),
        ("POST", "/levels/a%00b/pause", ["path"]),
        ("GET", "/ticks?level=a%00b", ["query", "level"]),
    ],
)
def test_a_nul_byte_is_refused_before_it_reaches_postgresql(
    tmp_path: Path,
    pg_store: SqlEventStore,
    pg_session_url: str,
    method: str,
    path: str,
    loc: list[str],
) -> None:
    with serving(settings_for(pg_session_url, tmp_path), pg_store) as client:
        answer = client.request(method, path)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"] == loc
    assert pg_store.last_position() == 0
