"""Ticks run by an agent CLI (Claude Code) under tickwork's caps, ledger and lifecycle.

The real CLI from the pinned ops/agents manifest, its model traffic through the tick's
own governor to the fake Anthropic upstream on a real socket.

The CLI tests skip only when the pinned CLI is not installed and `CI` is unset; under CI a
missing CLI fails them (`make` installs it with `npm ci --prefix ops/agents`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from html import escape
from pathlib import Path

import psutil
import pytest

from harness.cli.show_command import print_story_head
from harness.cli.tick_commands import _print_tick
from harness.config import (
    AgentsConfig,
    GovernorConfig,
    LevelConfig,
    PathsConfig,
    RoutingConfig,
    RunnerConfig,
    Settings,
    StoreConfig,
)
from harness.contracts import (
    AgentUsageChecked,
    BudgetSpent,
    GovernorFired,
    RouteFallback,
    ToolCalled,
)
from harness.contracts.agents import AGENT_CLIS, DEFAULT_AGENTS_DIR, missing_agent
from harness.contracts.payload import TickPayload
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec, fake_upstream
from harness.execution.agent_clis import agent_cli_states
from harness.execution.prepare import Preparer, TickSetupError
from harness.execution.runner import Runner
from harness.projections import calls_said, story_of, story_steps
from harness.store import StoredEvent, open_store
from tests import web
from tests.api_support import serving
from tests.store_support import migrated_sqlite
from tests.tick_support import SECRET, Harness, ready_launcher
from workers.agents import MalformedLineError
from workers.agents.claude_code import ClaudeCodeRun
from workers.agents.frame import HOOK_SCRIPT
from workers.agents.tick_governor import TickGovernor, TickGovernorServer, upstream_base
from workers.budget_guard import BudgetGuard
from workers.model import Target
from workers.recorder import EventRecorder
from workers.tool_budget import ToolBudget

CLAUDE = "claude-code"
NOW = datetime.now(UTC)


def require_cli(kind: str = CLAUDE) -> None:
    """Skip when the CLI is missing here, unless under CI, where that fails the test."""
    missing = missing_agent(kind, None)  # type: ignore[arg-type]
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(missing)
    pytest.skip(missing)


def bash(command: str) -> ToolCallSpec:
    return ToolCallSpec(name="Bash", arguments={"command": command, "description": command})


def claude_harness(tmp_path: Path, fake: FakeUpstream, **level: object) -> Harness:
    require_cli()
    level.setdefault("tools", "full")  # Bash, as the tests call it
    return Harness(tmp_path, fake, agent=CLAUDE, api="anthropic", rag=False, **level)


@pytest.mark.parametrize(
    ("model", "effort", "sent"),
    [
        # Thinking budgeted as a Strands tick's (`THINKING_BUDGETS`), or turned off.
        ("claude-sonnet-4-5", "medium", ("thinking", "budget_tokens", 4096)),
        ("claude-sonnet-4-5", "none", ("thinking", "type", "disabled")),
        # A model with an effort parameter gets the level's.
        ("claude-opus-4-6", "low", ("output_config", "effort", "low")),
    ],
)
def test_the_levels_effort_reaches_the_upstream_of_a_claude_code_tick(
    tmp_path: Path, model: str, effort: str, sent: tuple[str, str, object]
) -> None:
    with fake_upstream() as own:
        harness = claude_harness(tmp_path, own, model=model, effort=effort)
        outcome = harness.tick([Step(text="Done.")])
        assert outcome.status == "completed", outcome.reason
        calls = [body for body in own.state.received if "max_tokens" in body]
    parameter, field, value = sent
    assert calls and all(body[parameter][field] == value for body in calls)


def test_every_view_gives_a_cli_ticks_calls_as_its_terminal_event_does(
    tmp_path: Path, fake: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    harness = claude_harness(tmp_path, fake, max_tool_calls=1)
    outcome = harness.tick(
        [Step(tool_calls=[bash("echo one"), bash("echo two")]), Step(text="never asked")]
    )
    assert outcome.status == "completed", outcome.reason
    events = harness.events(outcome)
    ended = events[-1].data
    counts = (ended["model_calls"], ended["tool_calls"], ended["tool_calls_cancelled"])
    assert counts == (1, 1, 1), "one call, one tool run, one refused by the cap"
    story = story_of(outcome.tick_id, events)
    assert (story.model_calls, story.tool_calls, story.tool_calls_cancelled) == counts
    assert (story.prompt_tokens, story.completion_tokens) == (
        ended["prompt_tokens"],
        ended["completion_tokens"],
    )
    print_story_head(story)
    _print_tick(outcome.tick_id, outcome, events)
    said = calls_said(*counts)
    assert capsys.readouterr().out.count(said) == 2, said  # `show` and `tick`
    with serving(harness.settings, harness.store) as http:
        row = http.get(f"/ticks/{outcome.tick_id}").json()["tick"]
        page = http.get(f"/dashboard/ticks/{outcome.tick_id}").text
    assert (row["model_calls"], row["tool_calls"], row["tool_calls_cancelled"]) == counts
    assert escape(said) in page


def running(marker: str) -> list[str]:
    """Command lines of the processes whose command line holds `marker`."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if marker in cmdline and process.pid != os.getpid():
            found.append(cmdline)
    return found


def test_a_tool_left_running_in_the_background_ends_with_its_claude_code_tick(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = claude_harness(tmp_path, fake)
    marker = "signal.pause()  # 423"
    background = bash(f"nohup python3 -c 'import signal; {marker}' > /dev/null 2>&1 &")
    outcome = harness.tick([Step(tool_calls=[background]), Step(text="Started it.")])
    assert outcome.status == "completed", outcome.reason
    assert [e.data["status"] for e in harness.events(outcome) if e.type == ToolCalled.type] == [
        "ok"
    ]
    assert running(marker) == []


def test_the_governor_hard_ceiling_stops_a_claude_code_tick_in_anthropic_format(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = claude_harness(tmp_path, fake)
    governor = GovernorConfig(soft_tokens=500, hard_tokens=1000)
    harness.preparer.settings = harness.settings.model_copy(update={"governor": governor})
    outcome = harness.tick([Step(text="never asked")])
    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None and outcome.result.stop_reason == "context_limit"
    assert outcome.result.text  # the stop message, read by the CLI as the model's answer
    events = harness.events(outcome)
    assert [e.data["decision"] for e in events if e.type == GovernorFired.type] == ["hard"]
    assert not [e for e in events if e.type == BudgetSpent.type]
    assert not [e for e in fake.ledger if e.key == outcome.tick_id]


def test_a_spent_daily_budget_stops_a_claude_code_tick_before_its_next_call(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = claude_harness(tmp_path, fake, daily_token_budget=5000, reserve_tokens=0)
    outcome = harness.tick([Step(tool_calls=[bash("echo one")]), Step(text="never asked")])
    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None and outcome.result.stop_reason == "budget"
    assert outcome.result.text.startswith("Stopped before the next model call")
    spent = [e for e in harness.events(outcome) if e.type == BudgetSpent.type]
    assert len(spent) == 1 == len([e for e in fake.ledger if e.key == outcome.tick_id])


@pytest.mark.parametrize("why", ["missing", "overloaded"])
def test_a_claude_code_candidate_without_its_cli_or_upstream_falls_back_to_a_strands_one(
    tmp_path: Path, fake: FakeUpstream, why: str
) -> None:
    if why == "overloaded":
        require_cli()
    agents = tmp_path / "no-agents" if why == "missing" else DEFAULT_AGENTS_DIR
    catalog = tmp_path / "catalog.json"
    targets = {
        "claude": {
            "model": "claude-fake",
            "execution_class": "cloud",
            "api": "anthropic",
            "agent": CLAUDE,
            "base_url": fake.base_url("anthropic"),
        },
        "strands": {"model": "strands-fake", "execution_class": "cloud", "base_url": fake.url},
    }
    lane = {"rule_id": "r", "reason_codes": ["t"], "candidates": ["claude", "strands"]}
    catalog.write_text(
        json.dumps({"schema_version": 1, "targets": targets, "lanes": {"min": lane}})
    )
    settings = Settings(
        store=StoreConfig(url=migrated_sqlite(tmp_path)),
        paths=PathsConfig(results=tmp_path / "results", spool=tmp_path / "spool"),
        runner=RunnerConfig(grace_seconds=1, infra_retries=0, retry_backoff_seconds=0.05),
        routing=RoutingConfig(catalog=catalog),
        agents=AgentsConfig(dir=agents),
        levels={"min": LevelConfig(every="1m", prompt="Check the pager.", timeout_seconds=60)},
    )
    store = open_store(settings.store.url)
    env = {**os.environ, "ANTHROPIC_API_KEY": SECRET, "OPENAI_API_KEY": SECRET}
    prepared = Preparer(settings, store, env=env).prepare("min")
    steps = [Step(text="Answered by Strands.")]
    fake.script(prepared.payload.tick_id, steps if why == "missing" else [Step(status=529), *steps])
    outcome = Runner(settings, store, ready_launcher(), env=env).run(prepared)
    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None and outcome.result.target == "strands"
    events = store.read_stream(f"tick-{outcome.tick_id}")
    (fallback,) = [e.data for e in events if e.type == RouteFallback.type]
    assert (fallback["from_target"], fallback["to_target"]) == ("claude", "strands")
    assert ("npm ci --prefix" if why == "missing" else "overloaded (529)") in fallback["reason"]


def test_a_level_on_a_cli_that_is_not_installed_is_refused_alone(tmp_path: Path) -> None:
    settings = Settings(
        agents=AgentsConfig(dir=tmp_path),
        levels={
            "min": LevelConfig(every="1m", model="m", api="anthropic", agent=CLAUDE, prompt="p"),
            "hour": LevelConfig(every="1h", model="m", prompt="p"),
        },
    )
    (refused,) = settings.refused_levels().values()
    assert list(settings.refused_levels()) == ["min"] and settings.refusal("hour") is None
    assert "levels.min.agent" in refused and f"npm ci --prefix {tmp_path}" in refused
    with pytest.raises(TickSetupError, match=r"levels\.min\.agent"):
        Preparer(settings, None).prepare("min")


@pytest.mark.parametrize(
    "line",
    [{"no": "type"}, {"type": "assistant", "message": "text"}, {"type": "user", "message": {}}],
)
def test_a_line_that_is_no_claude_code_event_is_malformed(line: dict[str, object]) -> None:
    run = ClaudeCodeRun.__new__(ClaudeCodeRun)
    run._pending = {}
    with pytest.raises(MalformedLineError):
        run.read(line)


def test_the_tool_hook_denies_when_the_tick_cannot_be_asked() -> None:
    answer = subprocess.run(
        [sys.executable, "-I", "-S", str(HOOK_SCRIPT), "http://127.0.0.1:9/x", "token"],
        input=b'{"tool_name": "Bash", "tool_input": {}}',
        capture_output=True,
        check=True,
        timeout=30,
    )
    decision = json.loads(answer.stdout)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"


def test_doctor_names_each_cli_its_version_and_what_is_missing(tmp_path: Path) -> None:
    require_cli()
    (claude, *_) = [s for s in agent_cli_states(DEFAULT_AGENTS_DIR) if s.kind == CLAUDE]
    assert claude.ok and claude.version == claude.pinned
    missing = agent_cli_states(tmp_path)
    assert [s.kind for s in missing] == list(AGENT_CLIS)
    assert all(not s.ok and f"npm ci --prefix {tmp_path}" in str(s.problem) for s in missing)
    # OpenCode installed without the ripgrep it searches with (it would download its own).
    opencode, partial = AGENT_CLIS["opencode"], tmp_path / "partial"
    opencode.path(partial).parent.mkdir(parents=True)
    opencode.path(partial).write_text("#!/bin/sh\n")
    opencode.path(partial).chmod(0o755)
    (partial / opencode.companion_or_fail() / "node_modules").mkdir(parents=True)
    (ripgrep,) = opencode.helper_paths(partial)
    assert opencode.missing(partial) == (
        f"the opencode CLI's rg is not installed: no executable {ripgrep}; install the pinned "
        f"CLIs with `npm ci --prefix {partial}` (or `make`)"
    )


@pytest.mark.parametrize(
    ("script", "error", "failure_class"),
    [
        (
            'echo \'{"type": "system", "subtype": "init"}\'; echo "<html>oops"',
            "MalformedLine",
            "content",
        ),
        ("echo 'Segmentation fault' >&2; exit 139", "AgentCrashed", "infrastructure"),
    ],
)
def test_a_cli_that_prints_garbage_or_crashes_fails_the_tick_in_its_class(
    tmp_path: Path, fake: FakeUpstream, script: str, error: str, failure_class: str
) -> None:
    binary = tmp_path / "agents" / "node_modules" / ".bin" / "claude"
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\n{script}\n")
    binary.chmod(0o755)
    harness = Harness(tmp_path, fake, agent=CLAUDE, api="anthropic", rag=False, content_retries=0)
    harness.without_retries()
    settings = harness.settings.model_copy(update={"agents": AgentsConfig(dir=binary.parents[2])})
    harness.preparer.settings = settings
    outcome = harness.tick([])
    assert outcome.status == "failed"
    assert outcome.result is not None and outcome.result.error is not None
    assert (outcome.result.error.type, outcome.result.error.failure_class) == (error, failure_class)


def test_the_story_flags_a_cli_whose_own_usage_differs_from_the_ledger() -> None:
    checked = AgentUsageChecked(
        tick_id="t",
        level="min",
        agent=CLAUDE,
        reported_prompt_tokens=120,
        reported_completion_tokens=7,
        booked_prompt_tokens=100,
        booked_completion_tokens=7,
    )
    record = checked.to_record()
    stored = StoredEvent(1, checked.event_id, "tick-t", 1, record.type, 1, record.data, {}, NOW)
    (step,) = story_steps([stored])
    assert step.summary.startswith("usage MISMATCH") and "booked 100 + 7" in step.summary


def test_the_ticks_governor_answers_only_its_cli_and_its_hook_counts_against_the_cap(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    payload = TickPayload(
        tick_id="t-governor",
        level="min",
        prompt="p",
        model="fake-model",
        api="anthropic",
        agent=CLAUDE,
        max_tool_calls=1,
        result_path=tmp_path / "t.json",
        store_url=migrated_sqlite(tmp_path),
        spool_dir=tmp_path / "spool",
    )
    recorder = EventRecorder(payload)
    target = Target("anthropic", "fake-model", None, fake.base_url("anthropic"), None)
    budget = ToolBudget(payload.max_tool_calls)
    daily = BudgetGuard(payload, recorder)
    governor = TickGovernor(payload, recorder, target, None, budget, daily, lambda: None)
    server = TickGovernorServer(governor)
    origin = server.start()
    try:
        chat = {
            "model": "fake-model",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        }
        assert web.post(f"{origin}/v1/messages", json=chat).status_code == 401
        wrong = {"x-tickwork-hook-token": "guess"}
        assert web.post(server.hook_url, json={}, headers=wrong).status_code == 403
        hook = {"x-tickwork-hook-token": server.token}
        asked = [web.post(server.hook_url, json={"tool_use_id": n}, headers=hook) for n in "ab"]
        assert [a.json()["decision"] for a in asked] == ["allow", "deny"]
        assert (budget.executed, budget.cancelled, budget.met) == (1, 1, True)
    finally:
        server.stop()
        recorder.close()


def test_the_ticks_governor_forwards_openai_paths_to_the_base_less_its_v1() -> None:
    openai = Target("openai-chat", "m", None, "http://gw:4000/openai/v1/", None)
    anthropic = Target("anthropic", "m", None, "https://api.anthropic.com", None)
    assert upstream_base(openai) == "http://gw:4000/openai"
    assert upstream_base(anthropic) == "https://api.anthropic.com"
