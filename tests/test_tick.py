"""Ticks end to end, against real parts.

Real worker subprocesses, the real Strands SDK, the fake upstream on a real socket, and
the store the worker writes its spend to the moment it happens. Ticks are forked by the
warm launcher; the tests of what a launcher must guarantee (killing a tick's whole group,
booking a call cut by a kill once, handing a tick no key) run under the cold one too. What an
agent does inside its tick is the same code under either, so it runs under the warm one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from harness.config import LevelConfig, RunnerConfig, StoreConfig
from harness.contracts.events import LevelPaused, LevelResumed, TickCompleted, TickStarted
from harness.contracts.result import read_result
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.execution import new_tick_id, start_detached
from harness.execution.executors import LocalExecutor
from harness.execution.launchers import (
    ColdLauncher,
    Launcher,
    WarmLauncher,
)
from harness.execution.prepare import Preparer, TickSetupError, template_hash, tool_budget
from harness.execution.runner import Runner, TickOutcome
from harness.prices import PriceBook
from harness.projections import projector_for, spend_report
from harness.projections.levels import level_paused
from harness.projections.story import tick_story
from harness.projections.ticks import tick_page
from harness.rag import build_index
from harness.scheduling.service import Service
from harness.scheduling.triggers import slot_tick_id
from harness.scheduling.waves import SlotClaim, claim_wave
from harness.store import SqlEventStore, StoredEvent, open_store
from tests.tick_support import SECRET, Harness, calls, lifecycle, live_in_group, ready_launcher
from tests.waiting import long_enough, wait_until


@pytest.fixture
def knowledge(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "oncall.md").write_text(
        "# On call\n\nThe pager rotation changes on Mondays.\n\nEscalate database alerts to Ana."
    )
    (folder / "deploy.txt").write_text("Deploys freeze on Fridays after 15:00.")
    return folder


def local(harness: Harness) -> LocalExecutor:
    """The service's executor, running ticks with the harness's runner."""
    return LocalExecutor(harness.settings, harness.preparer, harness.runner, lambda line: None)


@pytest.fixture(params=["warm", "cold"])
def each_launcher(request: pytest.FixtureRequest) -> Launcher:
    """Each launcher the service can be configured with, the warm one shared and ready."""
    if request.param == "cold":
        return ColdLauncher()
    return ready_launcher()


def terminal_types(events: list[StoredEvent]) -> list[str]:
    terminal = {"TickCompleted", "TickFailed", "TickTimedOut", "TickCancelled", "TickLost"}
    return [e.type for e in events if e.type in terminal]


def test_cap_with_parallel_batches_cancels_the_rest_and_ends_with_text(
    tmp_path: Path, fake: FakeUpstream, knowledge: Path
) -> None:
    build_index(knowledge, tmp_path / "rag.db")
    harness = Harness(tmp_path, fake, max_tool_calls=4)
    three = calls("rag_lookup", "rag_lookup", "rag_lookup")
    outcome = harness.tick([three, three, three, Step(text="never asked")])

    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None
    assert outcome.result.tool_calls.executed == 4
    assert outcome.result.tool_calls.cancelled == 2
    assert outcome.result.stop_reason == "tool_budget"
    assert "tool budget of 4 calls" in outcome.result.text
    events = harness.events(outcome)
    statuses = [e.data["status"] for e in events if e.type == "ToolCalled"]
    assert sorted(statuses) == ["cancelled", "cancelled", "ok", "ok", "ok", "ok"]
    assert sum(e.type == "BudgetSpent" for e in events) == 2
    assert terminal_types(events) == ["TickCompleted"]
    assert outcome.result_path.exists()
    assert not outcome.log_path.exists(), "a healthy tick leaves no empty log behind"


def test_store_spend_equals_what_the_upstream_billed_across_ticks(
    tmp_path: Path, fake: FakeUpstream, knowledge: Path
) -> None:
    build_index(knowledge, tmp_path / "rag.db")
    harness = Harness(tmp_path, fake)
    scripts = [
        [calls("rag_lookup"), Step(text="Escalate to Ana.")],
        [calls("rag_lookup", "rag_lookup"), calls("rag_lookup"), Step(text="Done twice.")],
        [Step(text="Nothing to do.")],
    ]
    outcomes = [harness.tick(steps) for steps in scripts]
    assert [o.status for o in outcomes] == ["completed"] * 3

    ids = {o.tick_id for o in outcomes}
    billed = [e for e in fake.ledger if e.key in ids]
    spent = [e for o in outcomes for e in harness.events(o) if e.type == "BudgetSpent"]
    assert len(spent) == len(billed) == 6
    assert not any(e.data["estimated"] for e in spent)
    assert sum(e.data["prompt_tokens"] for e in spent) == sum(b.prompt_tokens for b in billed)
    assert sum(e.data["completion_tokens"] for e in spent) == sum(
        b.completion_tokens for b in billed
    )
    rag_answer = read_result(outcomes[0].result_path)
    assert rag_answer.text == "Escalate to Ana."


def test_a_stream_cut_before_usage_is_estimated_once_and_retried(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    cut = Step(text="A long answer that never finishes " * 5, cut_stream=True)
    outcome = harness.tick([cut, Step(text="Second attempt answers.")])
    assert outcome.status == "completed", outcome.reason
    events = harness.events(outcome)
    spent = [e.data for e in events if e.type == "BudgetSpent"]
    assert [s["estimated"] for s in spent] == [True, False]
    assert spent[0]["prompt_tokens"] > 0 and spent[0]["completion_tokens"] > 0
    (attempt,) = [e.data for e in events if e.type == "TickAttemptFailed"]
    assert attempt["failure_class"] == "infrastructure", attempt["reason"]
    assert terminal_types(events) == ["TickCompleted"]


def test_a_server_that_omits_usage_is_estimated_once(tmp_path: Path, fake: FakeUpstream) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    outcome = harness.tick([Step(text="An answer without usage.", omit_usage=True)])
    assert outcome.status == "completed"
    spent = [e.data for e in harness.events(outcome) if e.type == "BudgetSpent"]
    assert len(spent) == 1 and spent[0]["estimated"] is True
    assert spent[0]["prompt_tokens"] > 0 and spent[0]["completion_tokens"] > 0


def test_can_shell_gives_the_agent_a_real_shell(tmp_path: Path, fake: FakeUpstream) -> None:
    harness = Harness(tmp_path, fake, rag=False, can_shell=True)
    marker = tmp_path / "touched"
    shell = Step(tool_calls=[ToolCallSpec(name="shell", arguments={"command": f"touch {marker}"})])
    outcome = harness.tick([shell, Step(text="Touched it.")])
    assert outcome.status == "completed", outcome.reason
    assert marker.exists()
    traced = [e.data for e in harness.events(outcome) if e.type == "ToolCalled"]
    assert [(t["name"], t["status"]) for t in traced] == [("shell", "ok")]


def test_timeout_kills_the_whole_group_and_keeps_the_spend_already_made(
    tmp_path: Path, fake: FakeUpstream, knowledge: Path, each_launcher: Launcher
) -> None:
    def timed(timeout: float) -> tuple[Harness, TickOutcome, float, float]:
        folder = tmp_path / f"{timeout:g}s"  # a store of its own: a timeout pauses the level
        build_index(knowledge, folder / "rag.db")
        harness = Harness(folder, fake, each_launcher).without_retries()
        began = time.monotonic()
        outcome = harness.tick([calls("rag_lookup"), Step(text="too late", delay=120)], timeout)
        return harness, outcome, timeout, time.monotonic() - began

    def second_call_cut_off(attempt: tuple[Harness, TickOutcome, float, float]) -> bool:
        harness, outcome, _, _ = attempt
        return sum(e.type == "ModelCallStarted" for e in harness.events(outcome)) >= 2

    harness, outcome, timeout, elapsed = long_enough(timed, second_call_cut_off, first=4, cap=32)

    assert outcome.status == "timed_out"
    assert elapsed < timeout + 1.0 + 15, "the tick outlived its timeout plus grace"
    events = harness.events(outcome)
    # The call cut off is booked, estimated: by the worker in its grace (SIGTERM), or by
    # the runner for a worker the grace did not suffice.
    spent = [(e.data["estimated"], e.data["source"]) for e in events if e.type == "BudgetSpent"]
    assert spent[0] == (False, "worker") and [s[0] for s in spent] == [False, True], spent
    versions = {e.data["template_hash"] for e in events if e.type == "BudgetSpent"}
    assert versions == {template_hash("Check the pager.")}, "both of the prompt's version"
    assert terminal_types(events) == ["TickTimedOut"]
    started = next(e for e in events if e.type == "TickStarted")
    assert live_in_group(started.data["pid"]) == []


def test_a_timed_out_ticks_end_keeps_what_it_said_last_and_its_row_its_model_and_wait(
    tmp_path: Path, fake: FakeUpstream, standin_launcher: WarmLauncher
) -> None:
    harness = Harness(tmp_path, fake, standin_launcher).without_retries()
    prepared = harness.preparer.prepare("min", prompt="mutter", timeout=1)
    outcome = harness.runner.run(prepared)
    assert outcome.status == "timed_out"
    prepared.log_path.unlink()  # the end does not depend on the log staying
    end = harness.events(outcome)[-1]
    assert end.type == "TickTimedOut"
    assert "the stand-in is still thinking" in end.data["stderr_tail"]
    story = tick_story(harness.store, outcome.tick_id)
    assert story is not None and "still thinking" in (story.log_tail or "")
    projector_for(harness.store, PriceBook()).catch_up(["ticks"])
    (row,) = tick_page(harness.store, tick_id=outcome.tick_id).rows
    assert row.model == prepared.payload.model
    assert row.queue_wait_seconds is not None and row.queue_wait_seconds >= 0
    assert row.queue_wait_seconds == story.queue_wait_seconds


def test_a_ticks_start_calls_and_spend_name_its_prompt_template_before_substitution(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    template = "Level $level, slot $slot: check the pager."
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(template)
    harness = Harness(tmp_path, fake, rag=False, prompt="", prompt_file=prompt_file)
    first = harness.tick([calls("pager_status"), Step(text="Quiet.")])
    prompt_file.write_text(template + " Be brief.")
    second = harness.tick([Step(text="Quiet.")])
    assert (first.status, second.status) == ("completed", "completed"), first.reason
    versions = []
    for outcome in (first, second):
        named = {
            (e.type, e.data.get("template_hash"))
            for e in harness.events(outcome)
            if e.type in ("TickStarted", "ModelCallStarted", "ModelCalled", "BudgetSpent")
        }
        ((_, version),) = {(None, version) for _, version in named}
        assert {kind for kind, _ in named} == {
            "TickStarted",
            "ModelCallStarted",
            "ModelCalled",
            "BudgetSpent",
        }
        versions.append(version)
    assert versions == [template_hash(template), template_hash(template + " Be brief.")]
    projector_for(harness.store, PriceBook()).catch_up(["spend"])
    with harness.store.read_transaction() as conn:
        report = spend_report(conn, PriceBook(), by=["template"])
    assert [(row.group["template"], row.model_calls) for row in report] == sorted(
        zip(versions, [2, 1], strict=True)
    )


def test_a_tick_killed_mid_call_books_that_call_estimated(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    prepared = harness.preparer.prepare("min", timeout=60)
    tick_id = prepared.payload.tick_id
    fake.script(tick_id, [Step(text="answered after the kill", delay=3)])
    outcomes: list[TickOutcome] = []
    thread = threading.Thread(target=lambda: outcomes.append(harness.runner.run(prepared)))
    thread.start()
    wait_until(lambda: tick_id in fake.state.first_request, "the tick to reach the upstream")
    stream = harness.store.read_stream(f"tick-{tick_id}")
    started = next(e for e in stream if e.type == "TickStarted")
    os.kill(started.data["pid"], signal.SIGKILL)
    thread.join(60)

    assert outcomes and outcomes[0].status == "failed"
    events = harness.events(outcomes[0])
    assert terminal_types(events) == ["TickFailed"]
    begun = [e.data for e in events if e.type == "ModelCallStarted"]
    spent = [e.data for e in events if e.type == "BudgetSpent"]
    assert len(begun) == 1 and begun[0]["estimated_input_tokens"] > 0
    assert [(s["estimated"], s["source"], s["prompt_tokens"]) for s in spent] == [
        (True, "runner", begun[0]["estimated_input_tokens"])
    ]
    answered = wait_until(
        lambda: [entry for entry in fake.ledger if entry.key == tick_id],
        "the upstream to answer the call the kill cut off",
    )
    assert len(answered) == len(spent)
    assert live_in_group(started.data["pid"]) == []


@pytest.mark.parametrize("answers", [1, 2], ids=["first call", "second call"])
def test_a_call_answered_just_before_a_kill_is_booked_once(
    tmp_path: Path, fake: FakeUpstream, each_launcher: Launcher, answers: int
) -> None:
    """Killed the moment the upstream has sent an answer in full, a call is booked once.

    Whether the worker's own booking or the runner's estimate counts it depends on where
    the kill lands; that it is counted, exactly once, does not.
    """
    harness = Harness(tmp_path, fake, each_launcher, rag=False, can_shell=True)
    harness.without_retries()
    prepared = harness.preparer.prepare("min", timeout=60)
    tick_id = prepared.payload.tick_id
    # Killed after the first answer, the worker is held in its tool: however slowly the
    # kill lands on a busy machine, no second call can go out before it.
    command = "sleep 60" if answers == 1 else "true"
    shell = Step(tool_calls=[ToolCallSpec(name="shell", arguments={"command": command})])
    fake.script(tick_id, [shell, Step(text="Checked.")])

    def kill() -> None:
        stream = harness.store.read_stream(f"tick-{tick_id}")
        started = next(e for e in stream if e.type == "TickStarted")
        os.kill(started.data["pid"], signal.SIGKILL)

    for _ in range(answers - 1):
        fake.when_answered(tick_id, lambda: None)
    fake.when_answered(tick_id, kill)
    outcome = harness.runner.run(prepared)

    # The last answer ends the tick: a worker quick enough to finish it before the kill
    # lands completes, with every call booked by itself; any other tick the kill ends.
    ended = {"failed", "completed"} if answers == 2 else {"failed"}
    assert outcome.status in ended, outcome
    assert len([entry for entry in fake.ledger if entry.key == tick_id]) == answers
    events = harness.events(outcome)
    spent = [(e.data["estimated"], e.data["source"]) for e in events if e.type == "BudgetSpent"]
    assert len(spent) == answers, f"every answered call is booked once: {spent}"
    assert spent[:-1] == [(False, "worker")] * (answers - 1)


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic", "ollama"])
def test_a_call_answered_in_full_is_booked_once_when_its_worker_dies_before_booking_it(
    tmp_path: Path, fake: FakeUpstream, api: str
) -> None:
    """Killed between the answer's arrival and its booking, a Strands tick's call is booked.

    The window is pinned, not raced: the worker is stopped (SIGSTOP) the moment its
    request reaches the fake, so nothing of the answer is read, let alone booked, when the
    fake then sends it whole (usage and end of turn included) into the worker's socket;
    the worker is killed the moment the last byte is sent. The upstream billed a call the
    worker never booked: the runner books it, estimated, once.
    """
    harness = Harness(tmp_path, fake, rag=False, api=api).without_retries()
    prepared = harness.preparer.prepare("min", timeout=60)
    tick_id = prepared.payload.tick_id
    fake.script(tick_id, [Step(text="Answered in full.")])

    def signal_worker(signum: int) -> Callable[[], None]:
        def send() -> None:
            stream = harness.store.read_stream(f"tick-{tick_id}")
            os.kill(next(e for e in stream if e.type == "TickStarted").data["pid"], signum)

        return send

    fake.when_asked(tick_id, signal_worker(signal.SIGSTOP))
    fake.when_answered(tick_id, signal_worker(signal.SIGKILL))
    outcome = harness.runner.run(prepared)

    assert outcome.status == "failed", outcome.reason
    (billed,) = [entry for entry in fake.ledger if entry.key == tick_id]
    assert billed.usage_reported and billed.completion_tokens > 0
    events = harness.events(outcome)
    spent = [(e.data["estimated"], e.data["source"]) for e in events if e.type == "BudgetSpent"]
    assert spent == [(True, "runner")], "the answered call is booked once, estimated"


class ScriptLauncher(ColdLauncher):
    """Starts a stand-in worker (a real process) to test how the runner reads its end."""

    def __init__(self, code: str) -> None:
        super().__init__()
        self.code = code

    def argv(self) -> list[str]:
        return [sys.executable, "-c", self.code]


STUBBORN_CHILD = """
import json, subprocess, sys, time
payload = json.loads(sys.stdin.read())
subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
time.sleep(120)
"""


MISSING = "import sys; sys.stderr.write('boom'); sys.exit(3)"
CORRUPT = (
    "import json, sys, pathlib; p = json.loads(sys.stdin.read());"
    "pathlib.Path(p['result_path']).parent.mkdir(parents=True, exist_ok=True);"
    "pathlib.Path(p['result_path']).write_text('{\"ok\": tru')"
)


def misbehaving(
    tmp_path: Path, fake: FakeUpstream, how: tuple[str, str], standin: WarmLauncher
) -> Harness:
    """A harness whose ticks run `how`: cold script code, or a warm stand-in's command."""
    kind, what = how
    if kind == "script":
        return Harness(tmp_path, fake, ScriptLauncher(what))
    return Harness(tmp_path, fake, standin, prompt=what)


@pytest.mark.parametrize(
    ("how", "reason", "logged"),
    [
        (("script", MISSING), "is missing (worker exit code 3)", "boom"),
        (("standin", "raise"), "is missing (worker exit code 1)", "the stand-in crashed"),
        (("script", CORRUPT), "is corrupt", None),
        (("standin", "exit"), "is corrupt", None),
    ],
    ids=["cold-missing", "warm-missing", "cold-corrupt", "warm-corrupt"],
)
def test_missing_or_corrupt_result_is_a_failure_with_that_reason(
    tmp_path: Path,
    fake: FakeUpstream,
    standin_launcher: WarmLauncher,
    how: tuple[str, str],
    reason: str,
    logged: str | None,
) -> None:
    harness = misbehaving(tmp_path, fake, how, standin_launcher)
    outcome = harness.tick([])
    assert outcome.status == "failed" and outcome.reason is not None and reason in outcome.reason
    events = harness.events(outcome)
    assert terminal_types(events) == ["TickFailed"]
    if logged is not None:
        assert logged in next(e for e in events if e.type == "TickFailed").data["stderr_tail"]


@pytest.mark.parametrize(
    "how", [("script", STUBBORN_CHILD), ("standin", "stubborn")], ids=["cold", "warm"]
)
def test_a_child_ignoring_sigterm_does_not_outlive_the_grace(
    tmp_path: Path, fake: FakeUpstream, standin_launcher: WarmLauncher, how: tuple[str, str]
) -> None:
    harness = misbehaving(tmp_path, fake, how, standin_launcher).without_retries()
    began = time.monotonic()
    outcome = harness.tick([], timeout=1.5)
    assert outcome.status == "timed_out"
    assert time.monotonic() - began < 60, "the runner waited for the stubborn processes (120 s)"
    started = next(e for e in harness.events(outcome) if e.type == "TickStarted")
    assert live_in_group(started.data["pid"]) == []


def test_cancel_kills_a_running_tick_which_ends_cancelled(
    tmp_path: Path, fake: FakeUpstream, each_launcher: Launcher
) -> None:
    harness = Harness(tmp_path, fake, each_launcher, rag=False)
    prepared = harness.preparer.prepare("min", timeout=60)
    fake.script(prepared.payload.tick_id, [Step(text="slow", delay=60)])
    outcomes: list[TickOutcome] = []
    thread = threading.Thread(target=lambda: outcomes.append(harness.runner.run(prepared)))
    thread.start()
    wait_until(
        lambda: prepared.payload.tick_id in fake.state.first_request,
        "the tick to reach the upstream",
    )
    assert [ref.tick_id for ref in harness.runner.running()] == [prepared.payload.tick_id]
    assert harness.runner.cancel(prepared.payload.tick_id, "operator said stop")
    thread.join(60)
    assert outcomes and outcomes[0].status == "cancelled"
    assert not harness.runner.cancel(prepared.payload.tick_id)
    events = harness.events(outcomes[0])
    assert terminal_types(events) == ["TickCancelled"]
    assert events[-1].data["reason"] == "operator said stop"
    started = next(e for e in events if e.type == "TickStarted")
    assert live_in_group(started.data["pid"]) == []


def test_a_bad_payload_gets_a_clear_error_result(tmp_path: Path) -> None:
    result_path = tmp_path / "r.json"
    bad = {"tick_id": "t-bad", "result_path": str(result_path), "max_tool_calls": -1}
    worker = subprocess.run(
        [sys.executable, "-m", "workers.llm_worker"],
        input=json.dumps(bad).encode(),
        capture_output=True,
        timeout=60,
    )
    assert worker.returncode == 2
    assert b"max_tool_calls" in worker.stderr and b"level" in worker.stderr
    result = read_result(result_path)
    assert not result.ok and result.error is not None and result.error.type == "PayloadError"
    assert "max_tool_calls" in result.error.message
    assert oct(result_path.stat().st_mode & 0o777) == "0o600"

    garbage = subprocess.run(
        [sys.executable, "-m", "workers.llm_worker"],
        input=b"not json",
        capture_output=True,
        timeout=60,
    )
    assert garbage.returncode == 2 and b"invalid tick payload" in garbage.stderr


def test_no_api_key_lands_in_store_result_payload_or_log(
    tmp_path: Path, fake: FakeUpstream, knowledge: Path, each_launcher: Launcher
) -> None:
    build_index(knowledge, tmp_path / "rag.db")
    harness = Harness(tmp_path, fake, each_launcher)
    prepared = harness.preparer.prepare("min")
    fake.script(prepared.payload.tick_id, [calls("rag_lookup"), Step(text="ok")])
    outcome = harness.runner.run(prepared)
    assert outcome.status == "completed"
    harness.store.close()
    assert SECRET not in prepared.payload.model_dump_json()
    for path in [*tmp_path.rglob("*")]:
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"the API key leaked into {path}"


def test_tool_budget_precedence() -> None:
    config = LevelConfig(every="1m", max_tool_calls=7)
    assert tool_budget("min", config, {}) == 7
    assert tool_budget("min", LevelConfig(every="1m"), {}) == 30
    assert tool_budget("hour", LevelConfig(every="1h"), {}) == 300
    assert tool_budget("min", config, {"TICKWORK_MAX_TOOL_CALLS": "3"}) == 3
    env = {"TICKWORK_MAX_TOOL_CALLS": "3", "TICKWORK_MAX_TOOL_CALLS_MIN": "2"}
    assert tool_budget("min", config, env) == 2
    with pytest.raises(TickSetupError, match="TICKWORK_MAX_TOOL_CALLS='many'"):
        tool_budget("min", config, {"TICKWORK_MAX_TOOL_CALLS": "many"})


def test_an_unknown_level_is_a_clear_error(tmp_path: Path, fake: FakeUpstream) -> None:
    harness = Harness(tmp_path, fake)
    with pytest.raises(TickSetupError, match="no level named 'hourly'"):
        harness.preparer.prepare("hourly")


def test_store_unreachable_spools_the_tick_spend(tmp_path: Path, fake: FakeUpstream) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    settings = harness.settings.model_copy(
        update={"store": StoreConfig(url="postgresql://nobody@127.0.0.1:1/down")}
    )
    # The harness's ready fork server, as every test tick's (it preloads the PostgreSQL
    # driver the configuration's own launcher would ask for).
    runner = Runner(settings, None, harness.runner.launcher, env=harness.runner.env)
    prepared = Preparer(settings, None, env=harness.runner.env).prepare("min")
    fake.script(prepared.payload.tick_id, [Step(text="spooled")])
    outcome = runner.run(prepared)
    assert outcome.status == "completed"
    recovered: SqlEventStore = open_store(harness.settings.store.url, spool=runner.spool)
    types = [e.type for e in recovered.read_stream(f"tick-{outcome.tick_id}")]
    lifecycle = ["TickScheduled", "TickStarted", "ModelCallStarted", "BudgetSpent", "ModelCalled"]
    transcript = ["TranscriptEntry"] * 2  # the prompt and the answer
    assert sorted(types) == sorted([*lifecycle, "TickCompleted", *transcript])
    recovered.close()


def retrying_harness(tmp_path: Path, fake: FakeUpstream) -> Harness:
    harness = Harness(tmp_path, fake, rag=False)
    policy = RunnerConfig(
        grace_seconds=1, infra_retries=2, content_retries=1, retry_backoff_seconds=0.05
    )
    harness.settings = harness.settings.model_copy(update={"runner": policy})
    harness.runner.settings = harness.settings
    return harness


def test_infrastructure_failures_retry_then_pause_the_level(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = retrying_harness(tmp_path, fake)
    outcome = harness.tick([Step(status=500)] * 6)
    assert outcome.status == "failed"
    kinds = lifecycle(harness.events(outcome))
    assert kinds == [
        "TickScheduled",
        "TickStarted",
        "TickAttemptFailed",
        "TickStarted",
        "TickAttemptFailed",
        "TickStarted",
        "TickFailed",
    ]
    attempts = [e.data for e in harness.events(outcome) if e.type == "TickAttemptFailed"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert {a["failure_class"] for a in attempts} == {"infrastructure"}
    assert level_paused(harness.store, "min")
    paused = harness.store.read_stream("level-min")[-1]
    assert paused.type == "LevelPaused" and outcome.tick_id in paused.data["reason"]


def test_content_failures_get_bounded_retries_and_do_not_pause(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = retrying_harness(tmp_path, fake)
    outcome = harness.tick([Step(text=" "), Step(text=" "), Step(text="never reached")])
    assert outcome.status == "failed"
    kinds = [e.type for e in harness.events(outcome)]
    assert kinds.count("TickStarted") == 2 and kinds[-1] == "TickFailed"
    assert harness.events(outcome)[-1].data["failure_class"] == "content"
    assert not level_paused(harness.store, "min")


def test_a_paused_level_skips_its_slots_until_resumed(tmp_path: Path, fake: FakeUpstream) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    service = Service(harness.settings, harness.store, local(harness), lambda line: None)
    harness.runner.record_level(LevelPaused(level="min", reason="test"))
    slot = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    service.fire([(slot, "min")])
    assert [e.type for e in harness.store.read_stream("tick-min-20261130T090000Z")] == [
        "TickScheduled",
        "TickSkipped",
    ]
    harness.runner.record_level(LevelResumed(level="min"))
    service.fire([(slot + timedelta(minutes=1), "min")])
    service.wait_idle(60)
    kinds = [e.type for e in harness.store.read_stream("tick-min-20261130T090100Z")]
    assert kinds[-1] == "TickCompleted", kinds


def budgeted_harness(tmp_path: Path, fake: FakeUpstream) -> Harness:
    """Room for two ticks a day: 25,000 tokens, 10,000 reserved for each tick in flight."""
    return Harness(
        tmp_path,
        fake,
        rag=False,
        overlap="allow",
        daily_token_budget=25_000,
        reserve_tokens=10_000,
    )


def test_budget_reservations_stop_concurrent_ticks_from_overshooting(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = budgeted_harness(tmp_path, fake)
    service = Service(harness.settings, harness.store, local(harness), lambda line: None)
    first = datetime.now(UTC).replace(microsecond=0)
    slots = [first + timedelta(seconds=i) for i in range(5)]
    service.fire([(slot, "min") for slot in slots])
    service.wait_idle(60)
    ends = [harness.store.read_stream(f"tick-min-{slot:%Y%m%dT%H%M%SZ}")[-1] for slot in slots]
    assert [e.type for e in ends].count("TickCompleted") == 2
    assert [e.data.get("reason") for e in ends].count("budget") == 3
    exceeded = [
        e for e in harness.store.read_stream("level-min") if e.type == "LevelBudgetExceeded"
    ]
    assert len(exceeded) == 1 and exceeded[0].data["reserved_tokens"] == 20_000


def test_a_second_replica_sees_the_reservations_of_ticks_in_flight(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = budgeted_harness(tmp_path, fake)
    replicas = [
        Service(
            harness.settings,
            harness.store,
            LocalExecutor(
                harness.settings,
                harness.preparer,
                Runner(harness.settings, harness.store, env=harness.runner.env),
                print,
            ),
            print,
        )
        for _ in range(2)
    ]
    first = datetime.now(UTC).replace(microsecond=0)
    slots = [first + timedelta(seconds=i) for i in range(3)]
    fake.script(slot_tick_id("min", slots[0]), [Step(text="slow", delay=3)])
    replicas[0].fire([(slots[0], "min")])
    replicas[1].fire([(slots[1], "min"), (slots[2], "min")])
    for replica in replicas:
        replica.wait_idle(60)
    ends = [harness.store.read_stream(f"tick-{slot_tick_id('min', s)}")[-1] for s in slots]
    assert [e.type for e in ends] == ["TickCompleted", "TickCompleted", "TickSkipped"]
    assert ends[2].data["reason"] == "budget"
    scheduled = [harness.store.read_stream(f"tick-{slot_tick_id('min', s)}")[0] for s in slots]
    assert [e.data["reserved_tokens"] for e in scheduled] == [10_000, 10_000, 0]


def test_missed_slots_are_recorded_and_the_latest_in_the_window_runs_once(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, every="1s", catch_up_seconds=3)
    now = datetime.now(UTC).replace(microsecond=0)
    before = now - timedelta(seconds=8)
    old = SlotClaim(slot_tick_id("min", before), "min", before, skip="overlap")
    assert claim_wave(harness.store, harness.settings, [old]) == {old.tick_id}
    service = Service(harness.settings, harness.store, local(harness), lambda line: None)
    service.catch_up(now)
    service.wait_idle(60)
    missed = [before + timedelta(seconds=i) for i in range(1, 8)]
    ends = [harness.store.read_stream(f"tick-min-{s:%Y%m%dT%H%M%SZ}") for s in missed]
    assert all(stream[0].type == "TickScheduled" for stream in ends)
    assert [stream[-1].data.get("reason") for stream in ends[:-1]] == ["missed"] * 6
    assert ends[-1][-1].type == "TickCompleted"
    service.catch_up(now)
    assert [len(harness.store.read_stream(f"tick-min-{s:%Y%m%dT%H%M%SZ}")) for s in missed] == [
        len(stream) for stream in ends
    ]


def test_buffer_one_runs_exactly_one_held_slot_after_the_tick_in_flight(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, overlap="buffer_one")
    service = Service(harness.settings, harness.store, local(harness), lambda line: None)
    first = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    slots = [first + timedelta(minutes=i) for i in range(3)]
    fake.script(slot_tick_id("min", slots[0]), [Step(text="slow first", delay=3)])
    service.fire([(slots[0], "min")])
    wait_until(
        lambda: slot_tick_id("min", slots[0]) in fake.state.first_request,
        "the first tick to reach the upstream",
    )
    service.fire([(slots[1], "min")])
    service.fire([(slots[2], "min")])
    service.wait_idle(60)
    streams = [harness.store.read_stream(f"tick-{slot_tick_id('min', s)}") for s in slots]
    assert [s[-1].type for s in streams] == ["TickCompleted", "TickCompleted", "TickSkipped"]
    first_end = streams[0][-1].recorded_at
    buffered_start = next(e for e in streams[1] if e.type == "TickStarted").recorded_at
    assert buffered_start >= first_end


def test_prompts_render_level_slot_and_the_previous_result(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    template = 'Level $level at $slot. Last: $previous_result {"keep": "$braces"}'
    harness = Harness(tmp_path, fake, rag=False, prompt=template)
    slot = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    first = harness.preparer.prepare("min", slot=slot)
    assert first.payload.prompt == (
        'Level min at 2026-11-30T12:00:00+00:00. Last:  {"keep": "$braces"}'
    )
    fake.script(first.payload.tick_id, [Step(text="First answer.")])
    assert harness.runner.run(first).status == "completed"
    second = harness.preparer.prepare("min")
    assert second.payload.prompt.startswith("Level min at now. Last: First answer.")


def test_a_prompt_file_is_read_at_each_tick(tmp_path: Path, fake: FakeUpstream) -> None:
    prompt = tmp_path / "prompt.md"
    harness = Harness(tmp_path, fake, rag=False, prompt="", prompt_file=prompt)
    with pytest.raises(TickSetupError, match="prompt_file"):
        harness.preparer.prepare("min")
    prompt.write_text("Check $level.")
    assert harness.preparer.prepare("min").payload.prompt == "Check min."
    prompt.write_text("Edited.")
    assert harness.preparer.prepare("min").payload.prompt == "Edited."


def test_a_slot_whose_prompt_cannot_be_read_fails_without_stopping_the_scheduler(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    prompt = tmp_path / "prompt.md"
    harness = Harness(tmp_path, fake, rag=False, prompt="", prompt_file=prompt)
    service = Service(harness.settings, harness.store, local(harness), lambda line: None)
    slot = datetime(2026, 11, 30, 13, 0, tzinfo=UTC)
    service.fire([(slot, "min")])
    service.wait_idle(30)
    prompt.write_text("Now readable.")
    service.fire([(slot + timedelta(minutes=1), "min")])
    service.wait_idle(60)
    first = harness.store.read_stream(f"tick-{slot_tick_id('min', slot)}")
    assert [e.type for e in first] == ["TickScheduled", "TickFailed"]
    assert "prompt_file" in first[-1].data["reason"]
    second = harness.store.read_stream(f"tick-{slot_tick_id('min', slot + timedelta(minutes=1))}")
    assert second[-1].type == "TickCompleted"


def test_a_detached_tick_is_owned_by_a_process_of_its_own_session_to_its_end(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """`tickwork tick --no-wait`: the caller returns at once; the owner is not its child."""
    harness = Harness(tmp_path, fake, rag=False)
    tick_id = new_tick_id("min")
    fake.script(tick_id, [Step(text="Owned elsewhere.", delay=5)])
    start_detached(
        harness.settings,
        "min",
        tick_id=tick_id,
        prompt=None,
        timeout=None,
        force=False,
        router=None,
        upstream=lambda store: contextlib.nullcontext(harness.runner.env),
    )

    def started() -> list[StoredEvent]:
        return [
            e for e in harness.store.read_stream(f"tick-{tick_id}") if e.type == TickStarted.type
        ]

    owner = wait_until(started, "the detached tick to start", interval=0.02)[0].data["runner_pid"]
    assert owner != os.getpid() and os.getsid(owner) != os.getsid(0)
    assert psutil.Process(owner).ppid() != os.getpid(), "its parent ended: nobody reaps it"
    wait_until(
        lambda: TickCompleted.type in lifecycle(harness.store.read_stream(f"tick-{tick_id}")),
        "the detached tick to complete",
    )
