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
from dataclasses import dataclass, replace
from html import escape
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from harness.cli.show_command import print_story_head
from harness.cli.tick_commands import _print_tick
from harness.config import GovernorConfig, RunnerConfig
from harness.contracts import AgentUsageChecked, BudgetSpent, ModelCalled, TickCompleted, ToolCalled
from harness.contracts.agents import AgentKind
from harness.contracts.wire import Api
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.execution.runner import TickOutcome
from harness.prices import PriceBook
from harness.projections import calls_said, count_calls, projector_for, story_of, tick_page
from harness.store import StoredEvent
from tests.api_support import serving
from tests.tick_support import SECRET, Harness, assert_capped, billed_and_spent, require_cli
from tests.waiting import long_enough, wait_until

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
    search: Callable[[Path, str], ToolCallSpec] | None = None
    """A call that searches the files under the folder for the pattern, printing the lines
    found (None: the kind's tiers offer no search tool)."""

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


CLAUDE_CODE = replace(
    _cli("claude-code", "anthropic", ("Read", "Write", "Bash"), "file_path"),
    search=lambda folder, pattern: ToolCallSpec(
        name="Grep",
        arguments={"pattern": pattern, "path": str(folder), "output_mode": "content"},
    ),
)
OPENCODE = replace(
    _cli("opencode", "openai-chat", ("read", "write", "bash"), "filePath"),
    search=lambda folder, pattern: ToolCallSpec(
        name="grep", arguments={"pattern": pattern, "path": str(folder)}
    ),
)
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
    """Inside the workdir the tier's tools work; outside it, by path or link, nothing does.

    A search runs offline (OpenCode's needs the pinned ripgrep, which it would otherwise
    download on every start) and finds nothing through a link out of the workdir.
    """
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the pager is quiet\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text(SECRET_LINE + "\n")
    (work / "link.txt").symlink_to(elsewhere / "secret.txt")
    shell_marker = tmp_path / "shell-ran"
    harness = kind.harness(tmp_path, fake, tools=tier, workdir=work)
    searches = (
        []
        if kind.search is None
        else [
            Step(tool_calls=[kind.search(work, "pager")]),
            Step(tool_calls=[kind.search(work, "own secret")]),
            Step(tool_calls=[kind.search(elsewhere, "own secret")]),
            Step(tool_calls=[kind.search(work / "..", "own secret")]),
        ]
    )
    outcome = harness.tick(
        [
            *searches,
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
    if kind.search is not None:
        tool = kind.search(work, "pager").name
        found = [e.data["text"] for e in events if e.data.get("tool") == tool]
        assert "the pager is quiet" in found[0], found
    assert SECRET_LINE not in stored_text(outcome, events), "a read outside the workdir"
    assert not (elsewhere / "escaped.txt").exists(), "a write outside the workdir"
    assert not shell_marker.exists(), "a shell below the full tier"
    assert (work / "new.txt").exists() == (tier == "files")
    # Each refusal is the call's error, as a Strands tool's is: none is the cap's cancel.
    statuses = sorted(status for _, status in tools_of(events))
    ok = (2 if tier == "files" else 1) + (0 if kind.search is None else 2)
    calls = 7 + (0 if kind.search is None else 4)
    assert statuses == ["error"] * (calls - ok) + ["ok"] * ok, tools_of(events)


TOOL_USE_STOPS = {"tool_use", "tool_calls"}
"""A turn that asks for tools ends so: Anthropic's and Strands' word, OpenAI's."""


# Caps, spend, stop reasons -----------------------------------------------------------------


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
    called = [e.data for e in events if e.type == ModelCalled.type]
    assert [c["call"] for c in called] == list(range(1, len(billed) + 1))
    # Each call's stop reason and first token, as its upstream streamed them.
    assert all(c["stop_reason"] in TOOL_USE_STOPS for c in called), called
    assert all(0 <= (c["first_token_ms"] or -1) <= c["duration_ms"] for c in called), called
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


# Ended from outside: a cancel or the deadline -------------------------------------------


def running(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (not this one)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in " ".join(process.info["cmdline"] or []) and process.pid != os.getpid():
            found.append(process.pid)
    return found


FIRST_DEADLINE = {"strands": 1.0, "claude-code": 3.0, "opencode": 24.0}
"""A timed-out tick's first deadline: about twice what its kind takes to reach its first
tool on a quiet machine (a CLI's start is seconds of CPU); doubled while it was too short.
OpenCode reached its first tool 9 to 9.5 s after its tick was prepared at the suite's
load (4 to 5 on two cores): at 6 s nearly every run was an OpenCode start (~3 s of CPU)
spent for nothing, and 6 + 12 s of wall. At 12 s, every run of the suite on a slower host
(December 2026) missed it and reached it at 24 s: two starts (12.5 s of CPU) and 37 s of
wall, the last test of the run."""
LAST_DEADLINE = 128.0


def first_deadline(kind: Kind) -> float:
    """The kind's `FIRST_DEADLINE`: a case that waits ten seconds or more of it is `long`."""
    return FIRST_DEADLINE[kind.agent or "strands"]


HOLD_SECONDS = 600.0
"""How long the fake holds a call's answer: longer than any tick here lives."""


@dataclass
class EndedRun:
    """A tick ended from outside at a moment of its run, and whether it got there."""

    harness: Harness
    outcome: TickOutcome
    marker: str
    reached: bool


def end_a_tick(
    tmp_path: Path, fake: FakeUpstream, kind: Kind, moment: str, end: str, deadline: float
) -> EndedRun:
    """One tick run until `moment` (its tool runs, its model call is held), then ended.

    A cancel waits for the moment (the tool's process is seen, the fake has the request);
    a deadline cannot wait, so whether the tick got there is read afterwards: the tool
    left its start file, the fake holds the request.
    """
    tmp_path.mkdir()
    harness = kind.harness(tmp_path, fake, tools="full").without_retries()
    # A service's grace, not the suite's second: what the worker records in it is under
    # test, and a worker that ends on its own does not wait it out.
    runner = harness.settings.runner.model_copy(
        update={"grace_seconds": RunnerConfig().grace_seconds}
    )
    harness.settings = harness.runner.settings = harness.settings.model_copy(
        update={"runner": runner}
    )
    prepared = harness.preparer.prepare("min", timeout=deadline if end == "timeout" else None)
    tick_id = prepared.payload.tick_id
    started = tmp_path / f"tool-started-{tick_id}"
    # SIGTERM is the tick's, not the tool's to obey: it runs until the tick's end kills it.
    marker = f"signal.pause()  # {tick_id}"
    stubborn = (
        f"import pathlib, signal; pathlib.Path({str(started)!r}).touch(); "
        f"signal.signal(signal.SIGTERM, signal.SIG_IGN); {marker}"
    )
    steps = {
        "tool": [Step(tool_calls=[kind.shell(f'python3 -c "{stubborn}"')])],
        "model call": [Step(text="Held.", delay=HOLD_SECONDS)],
    }[moment]
    fake.script(tick_id, [*steps, Step(text="Never asked.")])

    def got_there() -> bool:
        return started.exists() if moment == "tool" else tick_id in fake.state.first_request

    if end == "timeout":
        outcome = harness.runner.run(prepared)
    else:
        outcomes: list[TickOutcome] = []
        runs = threading.Thread(target=lambda: outcomes.append(harness.runner.run(prepared)))
        runs.start()
        wait_until(got_there, f"the tick's {moment} to be under way", timeout=180)
        assert harness.runner.cancel(tick_id)
        runs.join(180)
        (outcome,) = outcomes
    fake.state.clear(tick_id)
    return EndedRun(harness, outcome, marker, got_there())


PAIRINGS = (
    (("cancel", "tool"), ("timeout", "model call")),
    (("timeout", "tool"), ("cancel", "model call")),
)
"""Each kind is ended twice, by a cancel and by its deadline, once mid-tool and once
mid-call; the kinds take the two pairings in turn, so each kind proves both ends and both
moments, and each of the four endings is proven on three kinds (each run of a CLI kind
costs seconds of CPU: all four on every kind doubled the suite's share of this case)."""
ENDINGS = [
    pytest.param(
        kind,
        end,
        moment,
        id=f"{kind.id}-{moment.replace(' ', '-')}-{end}",
        marks=[pytest.mark.long] if end == "timeout" and first_deadline(kind) >= 10 else [],
    )
    for number, kind in enumerate(KINDS)
    for end, moment in PAIRINGS[number % 2]
]


@pytest.mark.parametrize(("kind", "end", "moment"), ENDINGS)
def test_a_tick_ended_mid_tool_or_mid_call_leaves_no_process_and_tells_it_all(
    tmp_path: Path,
    fake: FakeUpstream,
    kind: Kind,
    moment: str,
    end: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Cancelled, or at its deadline, while a tool runs or a model call is in flight.

    The tick's whole tree goes with it (the agent, and a tool that ignores SIGTERM); the
    killed tool is in `ToolCalled` as `killed` and in the story; the call in flight is
    booked, estimated (its `BudgetSpent` and `ModelCalled`); and every view counts the
    same model calls, tool calls and attempts.

    A deadline is not a wait for the moment, so the case does not guess one long enough
    for a loaded machine (a CLI's start alone can take tens of seconds there): it starts
    with about twice what the kind takes on a quiet one (`FIRST_DEADLINE`), and when the
    tick timed out before its tool started or its call reached the fake (the start file
    and the fake's requests say so), runs a new tick with the deadline doubled
    (`long_enough`). The assertions are on what the events say happened, never on how
    long it took; a quiet run costs about its first deadline, not the 30 s a fixed safe
    one did. A cancel needs none of this: it waits for the moment, then cancels.
    """
    run = long_enough(
        lambda deadline: end_a_tick(tmp_path / f"{deadline:g}", fake, kind, moment, end, deadline),
        lambda run: run.reached,
        first=first_deadline(kind),
        cap=LAST_DEADLINE,
    )
    assert run.reached, f"the tick never reached its {moment} before its deadline"
    harness, outcome = run.harness, run.outcome
    assert outcome.status == ("cancelled" if end == "cancel" else "timed_out"), outcome.reason
    # The runner kills the tree it saw (tools in sessions of their own) once the worker has
    # ended, which may be a moment after the tick's end is recorded: within its grace.
    wait_until(
        lambda: running(run.marker) == [] and running(outcome.tick_id) == [],
        "the tick's tree to be gone",
        timeout=harness.settings.runner.grace_seconds + 60,
    )
    events = harness.events(outcome)
    story = story_of(outcome.tick_id, events)
    tools = [step for step in story.steps if step.kind == "tool"]
    if moment == "tool":
        assert [status for _, status in tools_of(events)] == ["killed"]
        (tool,) = tools
        assert tool.data["status"] == "killed" and run.marker in str(tool.arguments)
    else:
        assert tools_of(events) == [] and tools == []
        # Whoever booked it (the worker in its grace, or the runner for a worker that
        # died first), the held call is booked, estimated, and told as a model call.
        spent = [e for e in events if e.type == BudgetSpent.type]
        assert [s.data["estimated"] for s in spent] == [True], spent
        called = [e.data for e in events if e.type == ModelCalled.type]
        assert [c["budget_event_id"] for c in called] == [str(spent[0].event_id)], called
    assert_counts_agree_everywhere(harness, outcome, events, capsys)


def assert_counts_agree_everywhere(
    harness: Harness,
    outcome: TickOutcome,
    events: list[StoredEvent],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`show`, `tick`, `ticks`, the API and the tick page give the tick's one count."""
    counts = count_calls(events)
    said = calls_said(counts.model_calls, counts.tool_calls, counts.tool_calls_cancelled)
    story = story_of(outcome.tick_id, events)
    print_story_head(story)
    _print_tick(outcome.tick_id, outcome, events)
    assert capsys.readouterr().out.count(said) == 2, said  # `show` and `tick`
    assert (story.model_calls, story.tool_calls, story.tool_calls_cancelled) == (
        counts.model_calls,
        counts.tool_calls,
        counts.tool_calls_cancelled,
    )
    ended = events[-1]
    if ended.type == TickCompleted.type:
        assert ended.data["model_calls"] == counts.model_calls
        assert ended.data["tool_calls"] == counts.tool_calls
    projector_for(harness.store, PriceBook(harness.settings.prices)).catch_up(["ticks"])
    (listed,) = tick_page(harness.store, levels=["min"], limit=5).rows  # `ticks`
    with serving(harness.settings, harness.store) as http:
        row = http.get(f"/ticks/{outcome.tick_id}").json()["tick"]
        page = http.get(f"/dashboard/ticks/{outcome.tick_id}").text
    for view in (listed, SimpleNamespace(**row)):
        assert (view.model_calls, view.tool_calls, view.tool_calls_cancelled) == (
            counts.model_calls,
            counts.tool_calls,
            counts.tool_calls_cancelled,
        )
        assert view.attempts == story.attempts == 1
    assert escape(said) in page
