"""Every operation of the API's OpenAPI schema, fuzzed by schemathesis from the schema.

What the schema allows and what it does not, against the app in this process (its ASGI
interface, no socket), over a store holding ended ticks whose ids the fuzzer is handed:
a random id only ever meets a 404. Each answer must be no 5xx and conform to the schema
(status code, content type, headers, body). Bounded in examples, not in time, so a busy
machine makes it slower, never flaky.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from harness.api.app import create_app
from harness.contracts.events import BudgetSpent, TickCompleted, TickFailed, TickStarted
from harness.contracts.result import TickResult, write_result
from harness.store import SqlEventStore, open_store
from tests.api_support import manual_ticks, settings_for

EXAMPLES = settings(
    max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
TICKS = ("min-fuzzed-done", "hour-fuzzed-failed")


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[schemathesis.BaseSchema]:
    folder = tmp_path_factory.mktemp("api-fuzz")
    store = open_store(f"sqlite:///{folder}/events.db")
    try:
        ended_ticks(store, folder)
        settings = settings_for(str(store.engine.url), folder)
        # A level the fuzzer names starts no tick: the run-now owner is closed (409).
        manual = manual_ticks(settings, store)
        manual.close()
        app = create_app(settings, store, manual)
        yield schemathesis.openapi.from_asgi("/openapi.json", app)
    finally:
        store.close()


def ended_ticks(store: SqlEventStore, folder: Path) -> None:
    """A completed tick with spend, a result file and a log; a failed one without a log."""
    done, failed = TICKS
    log = folder / "done.log"
    log.write_text("worker started\nanswered\n" * 50)
    result = folder / "done.json"
    write_result(result, TickResult(tick_id=done, ok=True, text="Pager is quiet."))
    started = TickStarted(tick_id=done, level="min", pid=1, host="h", log_path=str(log))
    spent = BudgetSpent(
        tick_id=done, level="min", model="gpt-4o-mini", prompt_tokens=120, completion_tokens=3
    )
    completed = TickCompleted(tick_id=done, level="min", result_path=str(result))
    store.append(f"tick-{done}", [e.to_record() for e in (started, spent, completed)])
    store.append(
        f"tick-{failed}",
        [
            TickStarted(tick_id=failed, level="hour", pid=2, host="h").to_record(),
            TickFailed(tick_id=failed, level="hour", reason="boom").to_record(),
        ],
    )


def with_known_tick(case: schemathesis.Case, tick_id: str | None) -> schemathesis.Case:
    """The case about one of the store's ticks, when it names a tick and `tick_id` is set."""
    if tick_id is not None and case.path_parameters and "tick_id" in case.path_parameters:
        case.path_parameters["tick_id"] = tick_id
    return case


def test_every_operation_answers_within_its_schema_and_never_with_a_5xx(
    schema: schemathesis.BaseSchema,
) -> None:
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    for operation in operations:
        generated = st.one_of(operation.as_strategy(mode) for mode in GenerationMode)
        cases = st.tuples(generated, st.sampled_from([None, *TICKS]))

        @EXAMPLES
        @given(cases.map(lambda pair: with_known_tick(*pair)))
        def answers(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS)

        answers()


def test_every_numeric_query_parameter_is_bounded_in_the_schema(
    schema: schemathesis.BaseSchema,
) -> None:
    """An unbounded number reaches a seek or a SQL bound that cannot take it: a 500."""
    numeric = [
        (path, parameter["name"], parameter["schema"])
        for path, operations in schema.raw_schema["paths"].items()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["schema"].get("type") in ("integer", "number")
    ]
    assert {name for _, name, _ in numeric} >= {"limit", "after", "log_from"}
    unbounded = [(p, n) for p, n, s in numeric if "minimum" not in s or "maximum" not in s]
    assert unbounded == []
