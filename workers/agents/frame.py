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
import sys
from collections.abc import Iterable
from pathlib import Path

import orjson

from harness.contracts import (
    AGENT_CLIS,
    DEFAULT_AGENTS_DIR,
    AgentKind,
    AgentUsageChecked,
    FailureClass,
    ResultError,
    ResultToolCalls,
    ResultUsage,
    RouteCandidate,
    TickPayload,
    TickResult,
    missing_agent,
)
from workers.agents.base import AgentCliRun, CliTick, CliTranscript, MalformedLineError
from workers.agents.child import CliChild, adopt_orphans, kill_descendants, minimal_env
from workers.agents.tick_governor import (
    TickGovernor,
    TickGovernorServer,
)
from workers.budget_guard import BudgetGuard
from workers.model import Target, resolve_target
from workers.recorder import EventRecorder
from workers.structured_output import structured
from workers.tick_end import recorded_on_sigterm
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


def load(kinds: Iterable[AgentKind]) -> None:
    """Import these CLIs' modules (the fork server preloads its levels' for their ticks)."""
    for kind in kinds:
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
    return AgentTick(kind, run_type, payload, candidate, target, recorder).run()


class AgentTick:
    """One tick on a CLI: set up, the CLI run and read to its end, the result built."""

    def __init__(
        self,
        kind: AgentKind,
        run_type: type[AgentCliRun],
        payload: TickPayload,
        candidate: RouteCandidate | None,
        target: Target,
        recorder: EventRecorder,
    ) -> None:
        self.kind, self.payload, self.candidate, self.recorder = kind, payload, candidate, recorder
        self.folder = payload.own_folder()
        home, workdir = self.folder / "home", payload.work_folder()
        for path in (home, workdir):
            path.mkdir(parents=True, exist_ok=True)
        self.budget = ToolBudget(payload.max_tool_calls)
        self.child: CliChild | None = None
        self.governor = TickGovernor(
            payload,
            recorder,
            target,
            candidate,
            self.budget,
            BudgetGuard(payload, recorder, lambda: candidate.target if candidate else None),
            self.stop_child,
        )
        self.server = TickGovernorServer(self.governor)
        self.malformed: str | None = None
        self.crashed: str | None = None
        origin = self.server.start()
        hook = (sys.executable, "-I", "-S", str(HOOK_SCRIPT), self.server.hook_url)
        tick = CliTick(
            payload=payload,
            target=target,
            binary=AGENT_CLIS[kind].path(payload.agents_dir or DEFAULT_AGENTS_DIR),
            home=home,
            workdir=workdir,
            governor_url=origin,
            hook_command=" ".join(shlex.quote(part) for part in (*hook, self.server.token)),
            hook_url=self.server.hook_url,
            hook_token=self.server.token,
            client_key=self.server.client_key,
            refused_tools=self.governor.ledger_of_tick.cancelled_tools,
            tools_asked_at=self.governor.ledger_of_tick.tools_asked_at,
        )
        # The transcript is opened by the tick (its prompt, once, whichever agent runs it).
        stopped = self.governor.stopped_by_governor
        self.cli = run_type(tick, CliTranscript(payload, recorder, stopped))

    def stop_child(self) -> None:
        """End the CLI's whole tree now (an upstream refusal, a malformed line, SIGTERM)."""
        if self.child is not None:
            self.child.kill()

    def run(self) -> TickResult:
        """Start the CLI, read its lines to its end, stop the governor; the tick's result."""
        tick = self.cli.tick
        adopt_orphans()
        # The runner's deadline or a cancel: what the CLI left in flight is recorded first,
        # within the grace; then its whole tree goes, the tools it started in process groups
        # of their own too (the runner kills the tree it saw if the grace runs out).
        ended = (self.governor.book_calls_in_flight, self._record_killed_tools, kill_descendants)
        try:
            self.cli.prepare()
            env = minimal_env(tick.home, self.cli.env())
            prompt = self.folder / "prompt.txt"
            prompt.write_text(self.payload.prompt, encoding="utf-8")
            self.child = CliChild(
                self.cli.argv(), env, tick.workdir, prompt, self.folder / "cli.log"
            )
            with recorded_on_sigterm(*ended):
                self._read(self.child)
                code = self.child.wait()
            if code != 0 and not self.cli.report.ended and not self.child.killed:
                tail = self.child.stderr_tail(500)
                self.crashed = f"{self.kind} exited with {code} before its result: {tail}"
        except OSError as exc:
            self.crashed = f"{self.kind} could not be started: {exc}"
        finally:
            # The CLI, if it still runs, and whatever its tools left running in the background.
            kill_descendants()
            self._record_killed_tools()
            self.server.stop()
            self.governor.book_calls_in_flight()
        return self._result()

    def _record_killed_tools(self) -> None:
        """Each tool the hook let run that never ended, in the story as killed with the tick.

        The CLI reports a tool when it ends; one still running when the tick is cancelled,
        timed out or stopped would otherwise be missing from the story and the counts.
        """
        ledger, transcript = self.governor.ledger_of_tick, self.cli.transcript
        for tool_use_id, (name, arguments) in list(ledger.tools_asked.items()):
            if tool_use_id in ledger.cancelled_tools or tool_use_id in transcript.ended_tools:
                continue
            output = "(killed: the tick ended while the tool ran)"
            duration = self.cli.tick.tool_ms(tool_use_id)
            transcript.tool(name, tool_use_id, arguments, output, "killed", duration)

    def _read(self, child: CliChild) -> None:
        """Each line to the CLI's module; the first malformed one stops the CLI."""
        for raw in child.lines():
            if not raw.strip():
                continue
            try:
                line = orjson.loads(raw)
                if not isinstance(line, dict):
                    raise MalformedLineError("a line that is no JSON object")
                self.cli.read(line)
            except (orjson.JSONDecodeError, MalformedLineError) as exc:
                shown = raw[:MALFORMED_CHARS].decode("utf-8", errors="replace").strip()
                self.malformed = f"{self.kind} printed a malformed event line ({exc}): {shown}"
                child.kill()
                return

    def _check_usage(self) -> None:
        """The CLI's own final count beside the ledger's, in the tick's story."""
        report, booked = self.cli.report, self.governor.ledger_of_tick
        if not report.ended or report.prompt_tokens is None:
            return
        self.recorder.record(
            AgentUsageChecked(
                tick_id=self.payload.tick_id,
                level=self.payload.level,
                agent=self.kind,
                reported_prompt_tokens=report.prompt_tokens,
                reported_completion_tokens=report.completion_tokens or 0,
                booked_prompt_tokens=booked.prompt_tokens,
                booked_completion_tokens=booked.completion_tokens,
            )
        )

    def _error(self, text: str) -> ResultError | None:
        """What failed, first cause first: the upstream, the CLI's output, the CLI itself."""
        failure, report = self.governor.failure, self.cli.report
        if failure is not None:
            return ResultError(
                type="UpstreamRefused", message=failure.message, failure_class=failure.failure_class
            )
        if self.malformed is not None:
            return ResultError(
                type="MalformedLine", message=self.malformed, failure_class="content"
            )
        if self.crashed is not None:
            return ResultError(
                type="AgentCrashed", message=self.crashed, failure_class="infrastructure"
            )
        if report.error is not None and self.governor.stopped is None:
            return ResultError(
                type="AgentFailed", message=report.error[:2000], failure_class="content"
            )
        if not text:
            return ResultError(
                type="EmptyText", message="the agent ended without text", failure_class="content"
            )
        return None

    def _result(self) -> TickResult:
        """The tick's result from what the CLI said, what the governor booked and what failed."""
        self._check_usage()
        payload, booked = self.payload, self.governor.ledger_of_tick
        text = self.cli.report.text.strip()
        value = None
        stop_reason = self.governor.stopped or self.cli.report.stop_reason or "end_turn"
        error = self._error(text)
        if error is not None and error.type != "EmptyText":
            stop_reason = "error"  # the run broke; an empty or unparsed answer ended as it says
            if error.failure_class != "content":
                text = ""
        if error is None and payload.output == "json":
            value, error = structured(text, payload.output_schema)
        return TickResult(
            tick_id=payload.tick_id,
            ok=error is None,
            text=text,
            value=value,
            stop_reason=stop_reason,
            usage=ResultUsage(
                prompt_tokens=booked.prompt_tokens,
                completion_tokens=booked.completion_tokens,
                model_calls=booked.model_calls,
                estimated_calls=booked.estimated_calls,
            ),
            tool_calls=ResultToolCalls(
                executed=self.budget.executed, cancelled=self.budget.cancelled
            ),
            error=error,
            target=self.candidate.target if self.candidate else None,
        )
