"""OpenCode ticks: its config, its event lines, and the real CLI under tickwork's caps.

The unit tests read lines as OpenCode 1.18.33 printed them here against the fake upstream.
The CLI tests run the pinned `opencode` from ops/agents against the fake upstream through
the tick's own governor; they skip only when the CLI is not installed and `CI` is unset.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.contracts import ToolCalled, TranscriptEntry
from harness.contracts.events import TickStarted, tick_stream
from harness.contracts.payload import TICK_HEADER, TickPayload
from harness.contracts.tiers import capabilities, opencode_permissions
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec, fake_upstream
from harness.store import open_store
from tests.store_support import migrated_sqlite
from tests.tick_support import (
    Harness,
    require_cli,
)
from workers.agents import CliTick, CliTranscript, MalformedLineError
from workers.agents.opencode import PLUGIN, OpenCodeRun, opencode_config, step_tokens
from workers.model import Target
from workers.recorder import EventRecorder

OPENCODE = "opencode"


# The config and the lines, without the CLI ---------------------------------------------


def test_the_config_points_the_provider_at_the_governor_with_the_tick_and_the_tier() -> None:
    permissions = opencode_permissions(capabilities("read"))
    config = opencode_config("m-1", "http://127.0.0.1:5", "placeholder", "min-1", permissions)
    provider = config["provider"]["tickwork"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {
        "baseURL": "http://127.0.0.1:5/v1",
        "apiKey": "placeholder",
        "headers": {TICK_HEADER: "min-1"},
    }
    assert config["model"] == config["small_model"] == "tickwork/m-1"
    assert config["plugin"] == [PLUGIN.as_uri()] and PLUGIN.is_file()
    assert config["permission"] == permissions
    assert permissions["*"] == "deny" and "bash" not in permissions
    assert "instructions" not in config
    with_instructions = opencode_config(
        "m-1", "http://127.0.0.1:5", "k", "min-1", permissions, Path("/t/instructions.md")
    )
    assert with_instructions["instructions"] == ["/t/instructions.md"]


class Lines:
    """An OpenCodeRun fed by hand, recording into a real store."""

    def __init__(self, tmp_path: Path, refused: set[str] | None = None) -> None:
        self.payload = TickPayload(
            tick_id="min-1",
            level="min",
            prompt="go",
            model="fake-model",
            max_tool_calls=2,
            result_path=tmp_path / "r.json",
            store_url=migrated_sqlite(tmp_path),  # the migrated template's copy
            spool_dir=tmp_path / "spool",
        )
        store = open_store(self.payload.store_url)
        started = TickStarted(tick_id="min-1", level="min", pid=os.getpid(), host="")
        store.append(tick_stream("min-1"), [started.to_record()])
        self.store = store
        self.recorder = EventRecorder(self.payload)
        tick = CliTick(
            payload=self.payload,
            target=Target("openai-chat", "fake-model", None, None, None),
            binary=tmp_path / "opencode",
            home=tmp_path,
            workdir=tmp_path,
            governor_url="http://127.0.0.1:9",
            hook_command="",
            hook_url="http://127.0.0.1:9/_tickwork/pretool",
            hook_token="t",
            client_key="k",
            refused_tools=refused or set(),
            tools_asked_at={},
        )
        self.run = OpenCodeRun(tick, CliTranscript(self.payload, self.recorder, lambda: False))

    def feed(self, *lines: dict[str, Any]) -> None:
        for line in lines:
            self.run.read(line)

    def events(self) -> list[Any]:
        self.recorder.close()
        return self.store.read_stream(tick_stream("min-1"))


def step_start() -> dict[str, Any]:
    return {"type": "step_start", "part": {"type": "step-start"}}


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "part": {"type": "text", "text": words}}


def tool(call_id: str, status: str, **state: Any) -> dict[str, Any]:
    times = {"start": 1796155422501, "end": 1796155422553}
    body = {"status": status, "input": {"filePath": "a.txt"}, "time": times, **state}
    return {"type": "tool_use", "part": {"tool": "read", "callID": call_id, "state": body}}


def finish(reason: str, tokens_in: int, tokens_out: int, read: int = 0) -> dict[str, Any]:
    tokens = {"input": tokens_in, "output": tokens_out, "reasoning": 0}
    tokens["cache"] = {"read": read, "write": 0}  # type: ignore[assignment]
    return {"type": "step_finish", "part": {"reason": reason, "tokens": tokens}}


def test_lines_become_the_transcript_tool_events_and_the_last_steps_text(tmp_path: Path) -> None:
    lines = Lines(tmp_path, refused={"call_3"})
    lines.feed(
        step_start(),
        text("Reading."),
        tool("call_1", "completed", output="1: content a"),
        tool("call_3", "error", error="Not run: the tool budget of 2 calls is used up."),
        tool("call_4", "error", error="Model tried to call unavailable tool 'bash'."),
        finish("tool-calls", 7637, 95),
        step_start(),
        text("All read."),
        finish("stop", 7861, 5, read=100),
    )
    report = lines.run.report
    assert report.ended and report.text == "All read." and report.stop_reason == "end_turn"
    assert (report.prompt_tokens, report.completion_tokens) == (7637 + 7861 + 100, 100)
    events = lines.events()
    said = [
        e.data["text"]
        for e in events
        if e.type == TranscriptEntry.type and e.data["kind"] == "assistant"
    ]
    assert said == ["Reading.", "All read."]
    called = [
        (e.data["name"], e.data["status"], e.data["duration_ms"])
        for e in events
        if e.type == ToolCalled.type
    ]
    assert called == [("read", "ok", 52.0), ("read", "cancelled", 52.0), ("read", "error", 52.0)]


def test_an_error_line_ends_the_run_with_the_clis_own_words(tmp_path: Path) -> None:
    lines = Lines(tmp_path)
    lines.feed(
        {
            "type": "error",
            "error": {
                "name": "APIError",
                "data": {"message": "Incorrect API key", "statusCode": 401},
            },
        }
    )
    assert lines.run.report.ended and lines.run.report.error == "APIError: Incorrect API key"


@pytest.mark.parametrize(
    "line",
    [
        {"part": {}},
        {"type": "tool_use"},
        {"type": "tool_use", "part": {"tool": "read"}},
        {"type": "step_finish", "part": {"reason": "stop"}},
        {"type": "step_finish", "part": {"tokens": {"input": "many"}}},
        {"type": "error", "error": "boom"},
    ],
)
def test_a_line_that_is_no_opencode_event_is_malformed(
    tmp_path: Path, line: dict[str, Any]
) -> None:
    with pytest.raises(MalformedLineError):
        Lines(tmp_path).feed(line)


def test_a_later_versions_unknown_event_is_passed_over(tmp_path: Path) -> None:
    lines = Lines(tmp_path)
    lines.feed({"type": "session_status", "part": None})
    assert not lines.run.report.ended


def test_step_tokens_count_the_cached_prompt_and_the_reasoning() -> None:
    tokens = {"input": 10, "output": 3, "reasoning": 2, "cache": {"read": 5, "write": 1}}
    assert step_tokens(tokens) == (16, 5)


# The real CLI ---------------------------------------------------------------------------


def opencode_harness(tmp_path: Path, fake: FakeUpstream, **level: object) -> Harness:
    require_cli(OPENCODE)
    # OpenCode starts in seconds of CPU; on a loaded machine in tens of seconds of wall.
    level.setdefault("timeout_seconds", 240)
    return Harness(tmp_path, fake, agent=OPENCODE, rag=False, **level)


def read(path: Path) -> ToolCallSpec:
    return ToolCallSpec(name="read", arguments={"filePath": str(path)})


@pytest.mark.parametrize("effort", ["none", "high"])
def test_the_levels_effort_reaches_the_upstream_of_an_opencode_tick(
    tmp_path: Path, effort: str
) -> None:
    with fake_upstream() as own:
        # A reasoning model, for which OpenCode would otherwise send an effort of its own.
        harness = opencode_harness(tmp_path, own, model="gpt-5", effort=effort)
        outcome = harness.tick([Step(text="Done.")])
        assert outcome.status == "completed", outcome.reason
        calls = [body for body in own.state.received if "messages" in body]
    assert calls and all(body["reasoning_effort"] == effort for body in calls)
