"""The governor inside real ticks: worker subprocesses, the real Strands SDK, the fake upstream.

Calibration is off unless a test is about it, so each request's estimate is its size in
OpenAI form / 3.2, and the thresholds below put each call where a test wants it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harness.config import ApiConfig, GovernorConfig
from harness.contracts.calibration import Sample
from harness.contracts.events import GOVERNOR_STREAM, TickStarted
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.execution.adopt import adopt
from harness.execution.prepare import worker_env
from harness.execution.runner import TickOutcome
from harness.governor.alerts import ALERT_URLS_ENV
from harness.projections.calibration import current_calibrations
from tests.tick_support import Harness

SOFT, HARD = 1000, 2000
"""Tokens: soft from 3,200 characters, hard from 6,400 at the fixed 3.2."""


def governed(tmp_path: Path, fake: FakeUpstream, **limits: Any) -> Harness:
    harness = Harness(tmp_path, fake, rag=False)
    fields: dict[str, Any] = {
        "soft_tokens": SOFT,
        "hard_tokens": HARD,
        "calibrate": False,
        "directive": "WRAP UP ({est} of {threshold})",
        "stop_message": "STOPPED ({est} over {threshold})",
    }
    fields.update(limits)
    settings = harness.settings.model_copy(update={"governor": GovernorConfig(**fields)})
    harness.preparer.settings = settings
    harness.runner.settings = settings
    return harness


def run(harness: Harness, prompt: str, steps: list[Step]) -> TickOutcome:
    prepared = harness.preparer.prepare("min", prompt=prompt)
    harness.fake.script(prepared.payload.tick_id, steps)
    return harness.runner.run(prepared)


def fired(harness: Harness, outcome: TickOutcome) -> list[dict[str, Any]]:
    return [e.data for e in harness.events(outcome) if e.type == "GovernorFired"]


def big_call(chars: int) -> Step:
    """A tool call whose arguments the next request carries back to the model."""
    return Step(tool_calls=[ToolCallSpec(name="lookup", arguments={"q": "x" * chars})])


def test_soft_in_a_tick_appends_the_directive_to_the_last_user_message(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = governed(tmp_path, fake)
    outcome = run(harness, "Report. " + "y" * 4000, [Step(text="Summary: done.")])
    assert outcome.status == "completed"
    [event] = fired(harness, outcome)
    assert (event["decision"], event["threshold"], event["source"]) == ("soft", SOFT, "worker")
    request = next(r for r in reversed(fake.state.received) if "y" * 4000 in str(r["messages"]))
    last = request["messages"][-1]
    assert last["role"] == "user"
    assert last["content"][-1]["text"] == f"WRAP UP ({event['est_tokens']} of {SOFT})"
    samples = [e for e in harness.events(outcome) if e.type == "CalibrationSampled"]
    assert len(samples) == 1 and samples[0].data["prompt_tokens"] == fake.ledger[-1].prompt_tokens


def test_soft_after_a_tool_result_defers_and_sends_no_directive(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = governed(tmp_path, fake)
    outcome = run(harness, "Check the pager.", [big_call(4000), Step(text="Done.")])
    assert outcome.status == "completed"
    assert [e["decision"] for e in fired(harness, outcome)] == ["defer"]
    last_request = fake.state.received[-1]
    assert "WRAP UP" not in str(last_request["messages"])
    assert last_request["messages"][-1]["role"] == "tool"


def test_hard_cancels_the_call_and_the_tick_ends_with_the_stop_text(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = governed(tmp_path, fake)
    outcome = run(harness, "Check the pager.", [big_call(8000), Step(text="never sent")])
    billed = [e for e in fake.ledger if e.key == outcome.tick_id]
    assert outcome.status == "completed"
    assert outcome.result is not None and outcome.result.stop_reason == "context_limit"
    [event] = fired(harness, outcome)
    assert outcome.result.text == f"STOPPED ({event['est_tokens']} over {HARD})"
    assert len(billed) == 1
    spent = [e for e in harness.events(outcome) if e.type == "BudgetSpent"]
    assert len(spent) == 1
    fake.state.scripts.pop(outcome.tick_id, None)


def test_exempt_model_in_a_tick_is_never_cut(tmp_path: Path, fake: FakeUpstream) -> None:
    harness = governed(tmp_path, fake, exempt_models=("fake-model",))
    outcome = run(harness, "y" * 9000, [Step(text="Done.")])
    assert outcome.status == "completed" and outcome.result is not None
    assert outcome.result.text == "Done."
    assert fired(harness, outcome) == []


def test_calibration_persists_from_one_tick_process_to_the_next(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = governed(tmp_path, fake, calibrate=True)
    first = run(harness, "Report. " + "z" * 2000, [Step(text="ok")])
    assert first.status == "completed"
    learned = current_calibrations(harness.store)["fake-model"]
    assert learned.samples == 1
    ratio = learned.ratio(3.2)
    assert abs(ratio - 3.2) > 0.3  # the fake bills about 4 characters per token

    second = run(harness, "Report. " + "z" * 5000, [Step(text="ok")])
    [event] = fired(harness, second)
    assert event["chars_per_token"] == pytest.approx(ratio)


def test_a_tick_starts_from_the_calibration_the_runner_hands_it_and_folds_nothing(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = governed(tmp_path, fake, calibrate=True)
    sample = Sample(chars=5000, prompt_tokens=1000)
    learned = [sample.event("fake-model", "proxy", None).to_record() for _ in range(3)]
    harness.store.append(GOVERNOR_STREAM, learned)
    prepared = harness.preparer.prepare("min", prompt="Report. " + "z" * 6000)
    handed = prepared.payload.calibrations["fake-model"]
    assert (handed.window, handed.samples) == ((5.0,) * 3, 3)

    later = Sample(chars=2000, prompt_tokens=1000).event("fake-model", "proxy", None)
    harness.store.append(GOVERNOR_STREAM, [later.to_record()])
    folded = harness.store.checkpoints(["calibration"])
    harness.fake.script(prepared.payload.tick_id, [Step(text="ok")])
    outcome = harness.runner.run(prepared)

    [event] = fired(harness, outcome)
    assert event["chars_per_token"] == pytest.approx(5.0)
    assert harness.store.checkpoints(["calibration"]) == folded


def test_a_tick_over_its_ceiling_alerts_the_operator_once(
    tmp_path: Path, fake: FakeUpstream, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = receiver
    harness = governed(tmp_path, fake)
    harness.runner.settings = harness.runner.settings.model_copy(
        update={"api": ApiConfig(public_url="https://tickwork.example")}
    )
    harness.runner.env[ALERT_URLS_ENV] = url
    outcome = run(harness, "Check the pager.", [big_call(4000), big_call(4000), Step(text="x")])
    assert [e["decision"] for e in fired(harness, outcome)] == ["defer", "hard"]
    assert len(received) == 1
    assert "defer" in received[0]["title"] and outcome.tick_id in received[0]["message"]
    assert f"https://tickwork.example/ui/ticks/{outcome.tick_id}" in received[0]["message"]
    assert url not in str([e.data for e in harness.events(outcome)])
    fake.state.scripts.pop(outcome.tick_id, None)


def test_ticks_adopted_after_a_restart_alert_like_the_runners_own(
    tmp_path: Path, fake: FakeUpstream, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    """Both ways a restarted service ends a tick it did not start send the alert.

    The service that started the tick recorded its `TickStarted` at the launch, as a
    runner does: a worker's first record waits for it (`STARTED_WAIT_SECONDS`).
    """
    url, received = receiver
    harness = governed(tmp_path, fake)
    runner = harness.runner
    runner.env[ALERT_URLS_ENV] = url
    over = [big_call(4000), big_call(4000), Step(text="x")]
    for adoption in ("still running", "ended unwatched"):
        prepared = harness.preparer.prepare("min", prompt="Check the pager.")
        payload = prepared.payload
        fake.script(payload.tick_id, over)
        process = runner.launcher.start(
            payload.model_dump_json().encode(), prepared.log_path, worker_env(runner.env, payload)
        )
        runner.record(prepared.started(process.pid))
        if adoption == "still running":
            assert runner.watch(prepared.ref, process, 60).status == "completed"
        else:
            assert process.wait(60) is not None
            (started,) = [
                e
                for e in harness.store.read_stream(f"tick-{payload.tick_id}")
                if e.type == TickStarted.type
            ]
            assert adopt(runner, started, datetime.now(UTC), lambda line: None) is None
        assert len(received) == (1 if adoption == "still running" else 2), adoption
        assert payload.tick_id in received[-1]["message"]
