"""The tick's promises, stated once and proven for every agent kind and wire protocol.

Like a store's recorder suite run against every backend, each case below is written once
and runs against each `Kind` of `KINDS`: Strands on OpenAI chat, OpenAI Responses,
Anthropic Messages and Ollama; Claude Code; OpenCode. A kind knows only how to build a
level for itself and how its model names the tools a tier gives (read, write, shell);
what the tick promises, and how it is checked, is the same for all. A kind that fails a
case does not ship (README: "The tick conformance suite").

The CLI kinds run the real pinned CLIs of ops/agents (skipped when one is not installed,
unless under CI); every kind talks to the fake upstream over real sockets.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from harness.config import GovernorConfig
from harness.contracts import AgentUsageChecked, ModelCalled, ToolCalled
from harness.contracts.agents import AgentKind
from harness.contracts.wire import Api
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.execution.runner import TickOutcome
from harness.store import StoredEvent
from tests.tick_support import SECRET, Harness, assert_capped, billed_and_spent, require_cli
from tests.waiting import wait_until

Arguments = Callable[[Path], ToolCallSpec]
MAX_ATTEMPTS = 2
"""Calls a tick makes of one refused model call, retries inside the tick included."""


@dataclass(frozen=True)
class Kind:
    """One agent kind on one wire protocol: its level, and its model's names for the tools."""

    id: str
    api: Api
    agent: AgentKind | None
    """None: the Strands agent inside the worker."""
    read: Arguments
    """A call that reads the file at the path."""
    write: Callable[[Path, str], ToolCallSpec]
    """A call that writes the text to the file at the path."""
    shell: Callable[[str], ToolCallSpec]
    """A call that runs the command line."""

    def harness(self, tmp_path: Path, fake: FakeUpstream, **level: object) -> Harness:
        """A runner of ticks of this kind, for one level with these settings."""
        if self.agent is not None:
            require_cli(self.agent)
            # A CLI starts in seconds of CPU; on a loaded machine in tens of seconds of wall.
            level.setdefault("timeout_seconds", 240)
            level["agent"] = self.agent
        return Harness(tmp_path, fake, api=self.api, rag=False, **level)


def _strands(api: Api) -> Kind:
    return Kind(
        id=f"strands-{api}",
        api=api,
        agent=None,
        read=lambda path: ToolCallSpec(name="file_read", arguments={"path": str(path)}),
        write=lambda path, text: ToolCallSpec(
            name="file_editor",
            arguments={"command": "create", "path": str(path), "file_text": text},
        ),
        shell=lambda command: ToolCallSpec(name="shell", arguments={"command": command}),
    )


def _cli(agent: AgentKind, api: Api, names: tuple[str, str, str], path_field: str) -> Kind:
    """A CLI kind: its read, write and shell tools' names, and the field naming a file."""
    read, write, shell = names
    return Kind(
        id=agent,
        api=api,
        agent=agent,
        read=lambda path: ToolCallSpec(name=read, arguments={path_field: str(path)}),
        write=lambda path, text: ToolCallSpec(
            name=write, arguments={path_field: str(path), "content": text}
        ),
        shell=lambda command: ToolCallSpec(
            name=shell, arguments={"command": command, "description": "run it"}
        ),
    )


CLAUDE_CODE = _cli("claude-code", "anthropic", ("Read", "Write", "Bash"), "file_path")
OPENCODE = _cli("opencode", "openai-chat", ("read", "write", "bash"), "filePath")
KINDS = [
    *(_strands(api) for api in ("openai-chat", "openai-responses", "anthropic", "ollama")),
    CLAUDE_CODE,
    OPENCODE,
]


@pytest.fixture(params=KINDS, ids=[kind.id for kind in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    """Each agent kind and protocol in turn: every case of this module runs on each."""
    return request.param  # type: ignore[no-any-return]


def tools_of(events: list[StoredEvent]) -> list[tuple[str, str]]:
    """(name, status) of each tool call of the tick, as its `ToolCalled` events say."""
    return sorted((e.data["name"], e.data["status"]) for e in events if e.type == ToolCalled.type)


def stored_text(outcome: TickOutcome, events: list[StoredEvent]) -> str:
    """Everything the tick wrote down: its events and its result file."""
    result = Path(outcome.result_path).read_text() if outcome.result_path else ""
    return json.dumps([e.data for e in events]) + result


# A turn that never ended runs none of its tools ------------------------------------------


@pytest.mark.parametrize(
    ("fault", "failure_class"),
    [
        ({"cut_stream": True}, "infrastructure"),
        ({"unfinished": True}, "infrastructure"),
        ({"max_tokens": True}, "internal"),
    ],
    ids=["cut stream", "unfinished turn", "output limit"],
)
def test_no_tool_of_a_turn_that_never_ended_runs_and_the_tick_fails(
    tmp_path: Path, fake: FakeUpstream, kind: Kind, fault: dict[str, bool], failure_class: str
) -> None:
    """DESIGN invariant 15: a turn whose stream stopped before its end marker is a prefix.

    The upstream sends complete tool calls, then cuts the connection (or ends the body
    cleanly) with no `message_stop` / finish reason: nothing of it runs, and the tick is an
    infrastructure failure, retried under the level's rules. A turn ended at its output
    limit (`max_tokens`, `length`) runs nothing either; Strands' SDK refuses it with an
    error of no known class, and every kind fails it so.
    """
    marker = tmp_path / "ran"
    harness = kind.harness(tmp_path, fake, tools="full", content_retries=0).without_retries()
    unfinished = Step(tool_calls=[kind.shell(f"touch {marker}")], **fault)
    outcome = harness.tick([unfinished, Step(text="Never asked.")] * 3)
    assert outcome.status == "failed", outcome.reason
    assert outcome.result is not None and outcome.result.error is not None
    assert outcome.result.error.failure_class == failure_class, outcome.result.error
    assert not marker.exists(), "a tool call of an unfinished turn ran"
    assert tools_of(harness.events(outcome)) == []


# A tier confines file tools to the workdir -------------------------------------------------

SECRET_LINE = "the operator's own secret line"


@pytest.mark.parametrize("tier", ["read", "files"])
def test_a_tier_below_full_confines_file_tools_to_the_workdir_and_runs_no_shell(
    tmp_path: Path, fake: FakeUpstream, kind: Kind, tier: str
) -> None:
    """Inside the workdir the tier's tools work; outside it, by path or link, nothing does."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the pager is quiet\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text(SECRET_LINE + "\n")
    (work / "link.txt").symlink_to(elsewhere / "secret.txt")
    shell_marker = tmp_path / "shell-ran"
    harness = kind.harness(tmp_path, fake, tools=tier, workdir=work)
    outcome = harness.tick(
        [
            Step(tool_calls=[kind.read(work / "notes.txt")]),
            Step(tool_calls=[kind.read(elsewhere / "secret.txt")]),
            Step(tool_calls=[kind.read(work / ".." / "elsewhere" / "secret.txt")]),
            Step(tool_calls=[kind.read(work / "link.txt")]),
            Step(tool_calls=[kind.write(work / "new.txt", "written inside")]),
            Step(tool_calls=[kind.write(elsewhere / "escaped.txt", "written outside")]),
            Step(tool_calls=[kind.shell(f"touch {shell_marker}")]),
            Step(text="Done."),
        ]
    )
    assert outcome.status == "completed", outcome.reason
    events = harness.events(outcome)
    assert "the pager is quiet" in stored_text(outcome, events), "a read inside the workdir"
    assert SECRET_LINE not in stored_text(outcome, events), "a read outside the workdir"
    assert not (elsewhere / "escaped.txt").exists(), "a write outside the workdir"
    assert not shell_marker.exists(), "a shell below the full tier"
    assert (work / "new.txt").exists() == (tier == "files")
    # Each refusal is the call's error, as a Strands tool's is: none is the cap's cancel.
    statuses = sorted(status for _, status in tools_of(events))
    ok = 2 if tier == "files" else 1
    assert statuses == ["error"] * (7 - ok) + ["ok"] * ok, tools_of(events)


# Caps and spend -----------------------------------------------------------------------------


def test_the_tool_cap_holds_with_parallel_calls_and_spend_equals_the_bill(
    tmp_path: Path, fake: FakeUpstream, kind: Kind
) -> None:
    """Three parallel reads on a cap of two: two run, one is refused, each call is booked."""
    work = tmp_path / "work"
    work.mkdir()
    for name in "abc":
        (work / f"{name}.txt").write_text(f"content {name}\n")
    harness = kind.harness(tmp_path, fake, tools="read", workdir=work, max_tool_calls=2)
    reads = [kind.read(work / f"{name}.txt") for name in "abc"]
    said = Step(text=f"Reading; the key is {SECRET}.", tool_calls=reads)
    outcome = harness.tick([said, Step(text="Never asked.")])
    assert_capped(outcome, 2, executed=2, cancelled=1)
    events = harness.events(outcome)
    assert sorted(status for _, status in tools_of(events)) == ["cancelled", "ok", "ok"]
    billed, spent = billed_and_spent(fake, events, outcome.tick_id)
    assert billed and spent == billed
    numbers = [e.data["call"] for e in events if e.type == ModelCalled.type]
    assert numbers == list(range(1, len(billed) + 1))
    if kind.agent is not None:  # a CLI's own count of its usage agrees with the ledger
        (checked,) = [e.data for e in events if e.type == AgentUsageChecked.type]
        assert checked["reported_prompt_tokens"] == checked["booked_prompt_tokens"]
    if kind.api != "ollama":  # an Ollama tick holds no key it could leak
        assert SECRET not in stored_text(outcome, events)
    result = outcome.result
    assert result is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == tuple(
        map(sum, zip(*billed, strict=True))
    )


# Long input ---------------------------------------------------------------------------------


def test_a_200_kb_prompt_and_long_instructions_start_a_tick(
    tmp_path: Path, fake: FakeUpstream, kind: Kind
) -> None:
    """Longer than the kernel's limit of one argument (128 KiB): no kind may put it in argv."""
    prompt = "Check the pager. " + "Every line of the log matters. " * 6_700
    instructions = "Answer briefly. " + "Be exact. " * 14_000
    assert len(prompt) > 200_000 and len(instructions) > 131_072
    harness = kind.harness(tmp_path, fake, prompt=prompt, instructions=instructions)
    # Measured, not stopped: the governor's ceiling is not what this case is about.
    governor = GovernorConfig(soft_tokens=1_000_000)
    harness.preparer.settings = harness.settings.model_copy(update={"governor": governor})
    outcome = harness.tick([Step(text="The pager is quiet.")])
    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None and outcome.result.text == "The pager is quiet."
    billed, _ = billed_and_spent(fake, harness.events(outcome), outcome.tick_id)
    assert billed[0][0] * 4 >= len(prompt) + len(instructions), "both reached the model whole"


# Upstream refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "failure_class"),
    [
        (401, "configuration"),
        (429, "infrastructure"),
        (529, "infrastructure"),
        (500, "infrastructure"),
    ],
)
def test_an_upstream_refusal_fails_the_tick_in_its_class_without_a_retry_storm(
    tmp_path: Path, fake: FakeUpstream, kind: Kind, status: int, failure_class: str
) -> None:
    """The tick's failure class decides the retry, not the agent's own retries inside it.

    At most one call more: a Strands tick's SDK tries a throttled call again once, after
    a second (`MAX_ATTEMPTS`); a CLI's own retries would go on for minutes.

    The refusal quotes the key the request carried, as careless gateways do: it is
    redacted wherever the tick writes it.
    """
    harness = kind.harness(tmp_path, fake, content_retries=0).without_retries()
    refusal = Step(status=status, error_message="refused, key {key}")
    outcome = harness.tick([refusal] * 5)
    assert outcome.status == "failed", outcome.reason
    assert outcome.result is not None and outcome.result.error is not None
    assert outcome.result.error.failure_class == failure_class, outcome.result.error
    events = harness.events(outcome)
    called = [e.data for e in events if e.type == ModelCalled.type]
    assert 1 <= len(called) <= MAX_ATTEMPTS, called
    assert {c["failure_class"] for c in called} == {failure_class}
    assert SECRET not in stored_text(outcome, events)


# Cancel -------------------------------------------------------------------------------------


def running(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (not this one)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in " ".join(process.info["cmdline"] or []) and process.pid != os.getpid():
            found.append(process.pid)
    return found


def test_a_tick_cancelled_while_its_tool_runs_leaves_no_process(
    tmp_path: Path, fake: FakeUpstream, kind: Kind
) -> None:
    """The tick's whole tree goes with it: the agent, and the tool it was running."""
    harness = kind.harness(tmp_path, fake, tools="full").without_retries()
    prepared = harness.preparer.prepare("min")
    tick_id = prepared.payload.tick_id
    marker = f"signal.pause()  # {tick_id}"
    tool = kind.shell(f"python3 -c 'import signal; {marker}'")
    fake.script(tick_id, [Step(tool_calls=[tool]), Step(text="Never asked.")])
    outcomes: list[TickOutcome] = []
    runs = threading.Thread(target=lambda: outcomes.append(harness.runner.run(prepared)))
    runs.start()
    wait_until(lambda: running(marker), "the tick's tool to run", timeout=180)
    assert harness.runner.cancel(tick_id)
    runs.join(180)
    (outcome,) = outcomes
    assert outcome.status == "cancelled", outcome.reason
    # The runner kills the tree it saw (tools in sessions of their own) once the worker has
    # ended, which may be a moment after the tick's end is recorded: within its grace.
    wait_until(
        lambda: running(marker) == [] and running(tick_id) == [],
        "the tick's tree to be gone",
        timeout=harness.settings.runner.grace_seconds + 60,
    )
