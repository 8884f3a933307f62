"""Every API input, generated: a clear 4xx, never a 5xx, and a rejected one changes nothing.

Hypothesis drives each query parameter with arbitrary text; schemathesis drives every
operation of the OpenAPI schema with what the schema allows and what it does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from harness.api.app import create_app
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


def test_every_operation_answers_without_a_server_error(
    opened: tuple[SqlEventStore, Path],
) -> None:
    store, folder = opened
    app = create_app(settings_for(str(store.engine.url), folder), store)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 7

    for operation in operations:

        @EXAMPLES
        @given(case=operation.as_strategy())
        def answers(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=[not_a_server_error])

        answers()


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
