"""What the predecessor call layer did that ticks now do too.

JSON answers checked against a schema and retried as content, a timeout that grows with
the input, a global throttle after infrastructure failures, the stall hedge and panels.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.config import ConfigError, load_settings
from harness.contracts.result import read_result
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.digests.build import build_digest
from harness.execution.executors import LocalExecutor
from harness.execution.prepare import Preparer
from harness.execution.queue import Gate
from harness.execution.runner import TickOutcome
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling.waves import SlotClaim, claim_wave
from tests.tick_support import NAMED_UPSTREAM, Harness, live_in_group, make_settings
from tests.waiting import wait_until
from workers.structured_output import structured

HOUR = timedelta(hours=1)

STATUS_SCHEMA = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"type": "string"}},
}


def schema_file(tmp_path: Path, schema: object) -> Path:
    path = tmp_path / "status.schema.json"
    path.write_text(json.dumps(schema))
    return path


def test_a_json_level_retries_an_answer_that_does_not_validate_and_keeps_the_value(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    schema = schema_file(tmp_path, STATUS_SCHEMA)
    harness = Harness(tmp_path, fake, rag=False, output="json", output_schema=schema)
    outcome = harness.tick(
        [Step(text='{"status": 5}'), Step(text='Here:\n```json\n{"status": "ok",\n "n": 2}\n```')]
    )
    assert outcome.status == "completed"
    assert read_result(outcome.result_path).value == {"status": "ok", "n": 2}
    failed = [e.data for e in harness.events(outcome) if e.type == "TickAttemptFailed"]
    assert [f["failure_class"] for f in failed] == ["content"]
    assert failed[0]["reason"].startswith("SchemaMismatch") and "status" in failed[0]["reason"]
    prices = PriceBook({})
    now = datetime.now(UTC)
    digest = build_digest(
        harness.store,
        projector_for(harness.store, prices),
        prices,
        "d",
        now - HOUR,
        now + HOUR,
        ["min"],
    )
    assert [e.text for e in digest.levels[0].excerpts] == ['{"status":"ok","n":2}']


def test_a_json_level_without_a_schema_retries_an_answer_that_is_no_object(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, output="json")
    outcome = harness.tick([Step(text="null"), Step(text='{"status": "ok"}')])
    assert outcome.status == "completed"
    assert read_result(outcome.result_path).value == {"status": "ok"}
    failed = [e.data for e in harness.events(outcome) if e.type == "TickAttemptFailed"]
    assert [f["failure_class"] for f in failed] == ["content"]
    assert failed[0]["reason"].startswith("NotAnObject")


@pytest.mark.parametrize(
    ("answer", "schema", "failure"),
    [
        ("All fine, nothing to report.", None, "InvalidJSON"),
        ('{"status": "ok"', None, "InvalidJSON"),
        ("3", None, "NotAnObject"),
        ('"just a string"', None, "NotAnObject"),
        ("true", None, "NotAnObject"),
        ("null", None, "NotAnObject"),
        ('["status"]', None, "NotAnObject"),
        ('```json\n{"status": "ok"}\n```', None, None),
        ('["status"]', STATUS_SCHEMA, "SchemaMismatch"),
        ('Sure: {"status": "ok"} as asked', STATUS_SCHEMA, None),
    ],
)
def test_answers_are_read_as_json_as_the_predecessor_read_them(
    answer: str, schema: dict[str, object] | None, failure: str | None
) -> None:
    value, error = structured(answer, schema)
    assert (error.type if error else None) == failure
    assert (error.failure_class if error else "content") == "content"
    assert (value is None) == (failure is not None)


def test_an_output_schema_is_checked_when_the_configuration_loads(tmp_path: Path) -> None:
    broken = schema_file(tmp_path, {"type": "no-such-type"})
    config = tmp_path / "tickwork.toml"
    level = '[levels.min]\nevery = "1m"\nmodel = "m"\n'
    config.write_text(level + f'output = "json"\noutput_schema = "{broken}"\n')
    with pytest.raises(ConfigError, match=r"levels\.min.*status\.schema\.json.*JSON Schema"):
        load_settings(config)
    config.write_text(level + f'output_schema = "{broken}"\n')
    with pytest.raises(ConfigError, match='needs output = "json"'):
        load_settings(config)


def test_the_timeout_grows_with_the_size_of_the_input(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, prompt="x" * 1500, instructions="y" * 500)
    level = settings.levels["min"].model_copy(update={"timeout_per_kchar": 10.0})
    settings = settings.model_copy(update={"levels": {"min": level}})
    preparer = Preparer(settings, None, env=NAMED_UPSTREAM)
    assert preparer.prepare("min").timeout == 60 + 20
    assert preparer.prepare("min", timeout=5).timeout == 5


def test_after_an_infrastructure_failure_every_start_is_spaced_by_its_backoff() -> None:
    gate: Gate[str] = Gate(total=10, per_level={}, spacing=0.0)
    for i in range(3):
        gate.put(f"level-{i}", 0, str(i))
    throttled_at = time.monotonic()
    gate.throttle(0.2, duration=30)
    times = [throttled_at]
    for _ in range(3):
        assert gate.take() is not None
        times.append(time.monotonic())
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.19
    over: Gate[str] = Gate(total=10, per_level={}, spacing=0.0)
    over.throttle(30, duration=0)
    over.put("x", 0, "after the throttle")
    assert over.take() == ("x", "after the throttle")


def test_an_attempt_failing_on_infrastructure_throttles_the_queue(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    chosen: list[float] = []
    harness.runner.on_infrastructure_failure(chosen.append)
    outcome = harness.tick([Step(status=503), Step(text="recovered")])
    assert outcome.status == "completed"
    assert chosen == [pytest.approx(0.05)]


def test_a_stalled_attempt_gets_one_twin_and_the_first_valid_result_wins(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, hedge_after_seconds=0.1)
    twin_wins, original_wins = (harness.preparer.prepare("min", timeout=12) for _ in range(2))
    fake.script(twin_wins.payload.tick_id, [Step(delay=60)] * 3)
    fake.script(twin_wins.payload.tick_id + "-h", [Step(text="the twin's answer")] * 3)
    fake.script(original_wins.payload.tick_id, [Step(delay=7, text="late but first")] * 3)
    fake.script(original_wins.payload.tick_id + "-h", [Step(delay=60)] * 3)
    outcomes: dict[str, TickOutcome] = {}
    threads = [
        threading.Thread(
            target=lambda t=t: outcomes.update({t.payload.tick_id: harness.runner.run(t)})
        )
        for t in (twin_wins, original_wins)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    for tick, winner, text in [
        (twin_wins, "twin", "the twin's answer"),
        (original_wins, "original", "late but first"),
    ]:
        original = tick.payload.tick_id
        twin = original + "-h"
        outcome = outcomes[original]
        assert outcome.status == "completed" and read_result(outcome.result_path).text == text
        assert outcome.tick_id == (twin if winner == "twin" else original)
        mine = harness.store.read_stream(f"tick-{original}")
        theirs = harness.store.read_stream(f"tick-{twin}")
        started = next(e.data for e in mine if e.type == "HedgeStarted")
        assert (started["twin_id"], started["after_seconds"]) == (twin, 6.0)
        assert next(e.data["winner"] for e in mine if e.type == "HedgeDecided") == winner
        loser = mine if winner == "twin" else theirs
        assert (loser[-1].type, loser[-1].data["reason"]) == ("TickCancelled", "hedge_lost")
        assert theirs[0].type == "TickScheduled"
        for stream in (mine, theirs):
            pid = next(e.data["pid"] for e in stream if e.type == "TickStarted")
            assert live_in_group(pid) == []
    assert harness.runner.running() == []
    prices = PriceBook({})
    now = datetime.now(UTC)
    projector = projector_for(harness.store, prices)
    section = build_digest(
        harness.store, projector, prices, "d", now - HOUR, now + HOUR, ["min"]
    ).levels[0]
    assert section.hedges == 2 and section.hedge_tokens > 0


def test_a_panel_runs_n_members_and_one_replacement_for_a_lone_failure(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, panel=3, content_retries=0)
    executor = LocalExecutor(harness.settings, harness.preparer, harness.runner, lambda _: None)
    claim = SlotClaim("min-panel", "min", None)
    assert claim_wave(harness.store, harness.settings, [claim]) == {claim.tick_id}
    answers = {"p1": "yes", "p2": " ", "p3": "no", "pE": "maybe"}
    for mark, text in answers.items():
        fake.script(f"min-panel-{mark}", [Step(text=text)])
    executor.submit(claim)
    executor.wait_idle(60)
    executor.shutdown(grace=1)

    slot = harness.store.read_stream("tick-min-panel")
    decided = next(e.data["members"] for e in slot if e.type == "PanelDecided")
    assert [(m["tick_id"], m["status"]) for m in decided] == [
        ("min-panel-p1", "completed"),
        ("min-panel-p2", "failed"),
        ("min-panel-p3", "completed"),
        ("min-panel-pE", "completed"),
    ]
    assert slot[-1].type == "TickCompleted"
    side_by_side = read_result(Path(slot[-1].data["result_path"])).text
    assert side_by_side == "[min-panel-p1] yes\n\n[min-panel-p3] no\n\n[min-panel-pE] maybe"
    assert [e.type for e in slot].count("TickStarted") == 0
    prices = PriceBook({})
    now = datetime.now(UTC)
    projector = projector_for(harness.store, prices)
    section = build_digest(
        harness.store, projector, prices, "d", now - HOUR, now + HOUR, ["min"], 400
    ).levels[0]
    assert [(e.tick_id, e.text) for e in section.excerpts] == [
        ("min-panel", "[min-panel-p1] yes [min-panel-p3] no [min-panel-pE] maybe")
    ]


def test_a_twin_or_panel_member_waits_for_a_place_under_the_caps() -> None:
    gate: Gate[str] = Gate(total=1, per_level={})
    gate.put("min", 0, "running")
    assert gate.take() == ("min", "running")
    entered = threading.Event()
    stopped = threading.Event()
    entering = threading.Thread(target=lambda: gate.enter("min", stopped) and entered.set())
    entering.start()
    waiters = gate._condition._waiters
    wait_until(lambda: len(waiters) == 1, "the twin to wait for a place")
    assert not entered.is_set()
    gate.release("min")
    assert entered.wait(30) and gate.running() == 1
    entering.join()
    stopped.set()
    assert gate.enter("min", stopped) is False
