"""A tick run by an agent CLI: the frame every CLI module runs in.

The tick's folders (a fresh `HOME`; the level's `workdir` or a fresh one), the tick's own
governor that all of the CLI's model traffic goes through (`tick_governor`), the
`PreToolUse` hook that asks the tick's tool budget, the CLI as a child under the tick
(`child`), its lines read as they come (`base.AgentCliRun.read`), and the tick's result:
text, stop reason, usage as booked, tool calls, the failure class of whatever went wrong.
The CLI's own final usage is cross-checked against the ledger (`AgentUsageChecked`), a
mismatch shown in the tick's story, never summed.
"""

from __future__ import annotations

import importlib
import shlex
import signal
import sys
from pathlib import Path
from types import FrameType

import orjson

from harness.contracts.agents import AGENT_CLIS, DEFAULT_AGENTS_DIR, AgentKind, missing_agent
from harness.contracts.events import AgentUsageChecked
from harness.contracts.payload import RouteCandidate, TickPayload
from harness.contracts.result import (
    FailureClass,
    ResultError,
    ResultToolCalls,
    ResultUsage,
    TickResult,
)
from workers.agents.base import AgentCliRun, CliTick, CliTranscript, MalformedLineError
from workers.agents.child import CliChild, minimal_env
from workers.agents.tick_governor import (
    PLACEHOLDER_KEY,
    TickGovernor,
    TickGovernorServer,
)
from workers.budget_guard import DailyBudgetGuard
from workers.model import resolve_target
from workers.recorder import EventRecorder
from workers.structured_output import structured
from workers.tool_budget import ToolBudget

MODULES: dict[AgentKind, str] = {
    "claude-code": "workers.agents.claude_code:ClaudeCodeRun",
    "opencode": "workers.agents.opencode:OpenCodeRun",
}
"""Each CLI's module and class, imported when a tick runs it."""
HOOK_SCRIPT = Path(__file__).with_name("pretool_hook.py")
MALFORMED_CHARS = 200


def run_class(kind: AgentKind) -> type[AgentCliRun]:
    """The `AgentCliRun` of a CLI kind."""
    module, name = MODULES[kind].split(":")
    run: type[AgentCliRun] = getattr(importlib.import_module(module), name)
    return run


def load_all() -> None:
    """Import every CLI's module (the fork server, so forked ticks share them)."""
    for kind in MODULES:
        run_class(kind)


def _failed(
    payload: TickPayload, kind: str, message: str, failure_class: FailureClass
) -> TickResult:
    error = ResultError(type=kind, message=message[:2000], failure_class=failure_class)
    return TickResult(tick_id=payload.tick_id, ok=False, stop_reason="error", error=error)


def run_agent_tick(
    kind: AgentKind,
    payload: TickPayload,
    candidate: RouteCandidate | None,
    recorder: EventRecorder,
) -> TickResult:
    """Run the tick on the CLI `kind` and return its result (the caller writes it)."""
    missing = missing_agent(kind, payload.agents_dir)
    if missing is not None:
        return _failed(payload, "AgentMissing", missing, "configuration")
    run_type = run_class(kind)
    target = resolve_target(payload, candidate)
    if target.api != run_type.api:
        message = f"{kind} speaks {run_type.api}, and the tick's target is {target.api}"
        return _failed(payload, "AgentApiMismatch", message, "configuration")
    folder = payload.own_folder()
    home = folder / "home"
    workdir = payload.work_folder()
    for path in (home, workdir):
        path.mkdir(parents=True, exist_ok=True)
    budget = ToolBudget(payload.max_tool_calls)
    transcript = CliTranscript(payload, recorder)  # opened by the tick (the prompt, once)
    child: CliChild | None = None

    def stop_child() -> None:
        if child is not None:
            child.kill()

    governor = TickGovernor(
        payload,
        recorder,
        target,
        candidate,
        budget,
        DailyBudgetGuard(payload, recorder),
        stop_child,
    )
    server = TickGovernorServer(governor)
    origin = server.start()
    hook = " ".join(
        shlex.quote(part)
        for part in (sys.executable, "-I", "-S", str(HOOK_SCRIPT), server.hook_url, server.token)
    )
    tick = CliTick(
        payload=payload,
        target=target,
        binary=AGENT_CLIS[kind].path(payload.agents_dir or DEFAULT_AGENTS_DIR),
        home=home,
        workdir=workdir,
        governor_url=origin,
        hook_command=hook,
        hook_url=server.hook_url,
        hook_token=server.token,
        placeholder_key=PLACEHOLDER_KEY,
        refused_tools=governor.ledger_of_tick.cancelled_tools,
    )
    run = run_type(tick, transcript)
    malformed: str | None = None
    crashed: str | None = None
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: FrameType | None) -> None:
        # The runner's deadline or a cancel: the CLI's whole tree goes with the tick,
        # the tools it started in process groups of their own too.
        stop_child()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)

    try:
        run.prepare()
        child = CliChild(run.argv(), minimal_env(home, run.env()), workdir, folder / "cli.log")
        signal.signal(signal.SIGTERM, on_term)
        for raw in child.lines():
            if not raw.strip():
                continue
            try:
                line = orjson.loads(raw)
                if not isinstance(line, dict):
                    raise MalformedLineError("a line that is no JSON object")
                run.read(line)
            except (orjson.JSONDecodeError, MalformedLineError) as exc:
                shown = raw[:MALFORMED_CHARS].decode("utf-8", errors="replace").strip()
                malformed = f"{kind} printed a malformed event line ({exc}): {shown}"
                child.kill()
                break
        code = child.wait()
        if code != 0 and not run.report.ended and not child.killed:
            crashed = f"{kind} exited with {code} before its result: {child.stderr_tail(500)}"
    except OSError as exc:
        crashed = f"{kind} could not be started: {exc}"
    finally:
        if child is not None and child.process.poll() is None:
            child.kill()
        signal.signal(signal.SIGTERM, previous)
        server.stop()
    return _result(payload, kind, run, governor, budget, candidate, malformed, crashed, recorder)


def _result(
    payload: TickPayload,
    kind: AgentKind,
    run: AgentCliRun,
    governor: TickGovernor,
    budget: ToolBudget,
    candidate: RouteCandidate | None,
    malformed: str | None,
    crashed: str | None,
    recorder: EventRecorder,
) -> TickResult:
    """The tick's result from what the CLI said, what the governor booked and what failed."""
    report, booked = run.report, governor.ledger_of_tick
    if report.ended and report.prompt_tokens is not None:
        recorder.record(
            AgentUsageChecked(
                tick_id=payload.tick_id,
                level=payload.level,
                agent=kind,
                reported_prompt_tokens=report.prompt_tokens,
                reported_completion_tokens=report.completion_tokens or 0,
                booked_prompt_tokens=booked.prompt_tokens,
                booked_completion_tokens=booked.completion_tokens,
            )
        )
    text = report.text.strip()
    value = None
    error: ResultError | None = None
    if governor.failure is not None:
        failure = governor.failure
        error = ResultError(
            type="UpstreamRefused", message=failure.message, failure_class=failure.failure_class
        )
    elif malformed is not None:
        error = ResultError(type="MalformedLine", message=malformed, failure_class="content")
    elif crashed is not None:
        error = ResultError(type="AgentCrashed", message=crashed, failure_class="infrastructure")
    elif report.error is not None and governor.stopped is None:
        error = ResultError(
            type="AgentFailed", message=report.error[:2000], failure_class="content"
        )
    elif not text:
        error = ResultError(
            type="EmptyText", message="the agent ended without text", failure_class="content"
        )
    elif payload.output == "json":
        value, error = structured(text, payload.output_schema)
    stop_reason = governor.stopped or report.stop_reason or "end_turn"
    return TickResult(
        tick_id=payload.tick_id,
        ok=error is None,
        text=text if error is None or error.failure_class == "content" else "",
        value=value,
        stop_reason="error" if error is not None and error.type != "EmptyText" else stop_reason,
        usage=ResultUsage(
            prompt_tokens=booked.prompt_tokens,
            completion_tokens=booked.completion_tokens,
            model_calls=booked.model_calls,
            estimated_calls=booked.estimated_calls,
        ),
        tool_calls=ResultToolCalls(executed=budget.executed, cancelled=budget.cancelled),
        error=error,
        target=candidate.target if candidate else None,
    )
