"""One tick's run along its route: each candidate tried in turn, and the tick's result.

The tick's hooks (`TickHooks`) are built once by the entry point and shared by every
candidate, so the tool budget, spend and daily budget are the tick's whichever candidate
answers. A candidate that needs a self-check answers it before it runs, on its own
endpoint, as a metered call of the tick, whatever agent kind then runs the tick there: a
Strands agent, or an agent CLI (`workers.agents`) under the tick's own governor. A
candidate that fails on infrastructure hands over to the next (`CandidateWalk.move_on`).
"""

from __future__ import annotations

import functools
import traceback
from dataclasses import dataclass
from typing import Any

from strands import Agent, ModelRetryStrategy
from strands.agent.conversation_manager import NullConversationManager

from harness.contracts import (
    API_KEY_ENV_OF,
    ResultError,
    ResultToolCalls,
    ResultUsage,
    RouteCandidate,
    TickPayload,
    TickResult,
    keep_environment_private,
)
from workers.budget_guard import BudgetGuard
from workers.failures import failure_class, failure_message
from workers.fallback import CandidateWalk
from workers.governor_hook import ContextGovernor
from workers.model import AgentMissingError, MissingEndpointError, build_model
from workers.rag_tool import make_rag_lookup
from workers.rate_limit import RateLimitGate
from workers.recorder import EventRecorder
from workers.spend import SpendMeter
from workers.structured_output import structured
from workers.tick_end import recorded_on_sigterm
from workers.tier_tools import tier_tools
from workers.tool_budget import ToolBudget
from workers.transcript import Transcript
from workers.wire import observing


class AgentTickError(Exception):
    """An agent CLI's tick failed: its message, for the fallback's record."""


@dataclass(frozen=True)
class TickHooks:
    """The hook providers of a Strands tick, one per concern, shared by its candidates."""

    budget: ToolBudget
    governor: ContextGovernor
    daily: BudgetGuard
    gate: RateLimitGate
    transcript: Transcript
    spend: SpendMeter

    def of_the_tick(self) -> list[Any]:
        """In the order they must run: the spend meter last, to see the calls others cancel."""
        return [
            self.budget,
            self.governor,
            self.daily,
            self.gate,
            self.transcript,
            self.spend,
        ]

    def of_a_self_check(self) -> list[Any]:
        """A self-check is metered and budgeted as the tick's, and runs no tool."""
        return [self.daily, self.gate, self.spend]

    def stop_reason(self, answer: Any) -> str:
        """Why the agent stopped: the hook that stopped it, else the model's own reason."""
        for stopped, reason in (
            (self.gate.stopped, "rate_limit"),
            (self.daily.stopped, "budget"),
            (self.governor.stopped, "context_limit"),
            (self.budget.exhausted, "tool_budget"),
        ):
            if stopped:
                return reason
        return str(answer.stop_reason)


def tick_tools(payload: TickPayload) -> list[Any]:
    """The tools the tick's tier and settings give a Strands agent."""
    tools: list[Any] = [make_rag_lookup(payload.rag)] if payload.rag.enabled else []
    caps = payload.capabilities()
    if caps.shell:
        # Its commands run as this process's user: /proc/<this pid>/environ still shows
        # the variables this process withheld from them (the collector's headers).
        keep_environment_private()
    return tools + tier_tools(caps, payload.work_folder())


class RouteRun:
    """The tick on its route: a candidate chosen, self-checked if it must be, and run."""

    def __init__(
        self,
        payload: TickPayload,
        recorder: EventRecorder,
        walk: CandidateWalk,
        hooks: TickHooks,
        tools: list[Any],
    ) -> None:
        self.payload = payload
        self.recorder = recorder
        self.walk = walk
        self.hooks = hooks
        self.tools = tools
        self._using: RouteCandidate | None = None
        """The candidate whose model the hooks meter now."""

    def run(self) -> TickResult:
        """The tick's result from the first candidate that answers (or the last that failed)."""
        while True:
            chosen = self.walk.choose()
            kind = chosen.agent if chosen else self.payload.agent
            try:
                if kind == "strands":
                    self.use(chosen)
                if chosen is not None:
                    self.walk.self_check(chosen, functools.partial(self.ask, chosen))
                if kind == "strands":
                    return self.with_usage(self.on_strands())
                result = self.on_cli(kind, chosen)
                if result.error is None or not self.walk.move_on(
                    AgentTickError(result.error.message), result.error.failure_class
                ):
                    return result
                # its calls are in the ledger; the next candidate answers
            except Exception as exc:
                if not self.walk.move_on(exc, failure_class(exc)):
                    raise

    def use(self, chosen: RouteCandidate | None) -> None:
        """Meter, gate and govern the calls of `chosen`'s model (a self-check's too)."""
        hooks = self.hooks
        model = build_model(
            self.payload,
            chosen,
            observing(self.walk.observe_answer, hooks.gate.observe_answer),
        )
        target = chosen.target if chosen else None
        hooks.governor.model = hooks.spend.use(model, target)
        hooks.gate.use(model, target)
        self._using = chosen

    def ask(self, chosen: RouteCandidate, question: str) -> str | None:
        """A self-check's answer; None when the budget or rate limit stopped the call.

        An agent CLI's candidate is asked on its endpoint by a Strands model of its own:
        the CLI would take seconds to start for one line.
        """
        if self._using is not chosen:
            self.use(chosen)
        hooks = self.hooks
        answer = str(self.agent(hooks.of_a_self_check(), "tickwork-selfcheck", own=False)(question))
        return None if hooks.daily.stopped or hooks.gate.stopped else answer

    def agent(self, hooks: list[Any], name: str, own: bool = True) -> Agent:
        """An agent on the current candidate's model; not `own`: no tools, no instructions."""
        payload = self.payload
        return Agent(
            model=self.hooks.spend.model,
            tools=self.tools if own else [],
            system_prompt=(payload.instructions or None) if own else None,
            callback_handler=None,
            conversation_manager=NullConversationManager(),
            context_manager=False,
            hooks=hooks,
            retry_strategy=ModelRetryStrategy(max_attempts=2, initial_delay=1, max_delay=2),
            name=name,
            trace_attributes={"tickwork.tick_id": payload.tick_id, "tickwork.level": payload.level},
        )

    def on_strands(self) -> TickResult:
        """The tick run once by a Strands agent under the tick's hooks."""
        payload, hooks = self.payload, self.hooks
        agent = self.agent(hooks.of_the_tick(), f"tickwork-{payload.level}")
        with recorded_on_sigterm(hooks.transcript.end, hooks.spend.end):
            answer = agent(payload.prompt)
        text = str(answer).strip()
        error, value = None, None
        if not text:
            error = ResultError(
                type="EmptyText", message="the agent ended without text", failure_class="content"
            )
        elif payload.output == "json":
            value, error = structured(text, payload.output_schema)
        return TickResult(
            tick_id=payload.tick_id,
            ok=error is None,
            text=text,
            value=value,
            stop_reason=self.hooks.stop_reason(answer),
            error=error,
        )

    def on_cli(self, kind: Any, chosen: RouteCandidate | None) -> TickResult:
        """The tick run by an agent CLI, its calls booked by the tick's own governor.

        Its usage is the tick's: the CLI's calls and a self-check's before them.
        """
        from workers.agents import run_agent_tick

        result = run_agent_tick(kind, self.payload, chosen, self.recorder)
        spend, usage = self.hooks.spend, result.usage
        together = ResultUsage(
            prompt_tokens=usage.prompt_tokens + spend.prompt_tokens,
            completion_tokens=usage.completion_tokens + spend.completion_tokens,
            model_calls=usage.model_calls + spend.model_calls,
            estimated_calls=usage.estimated_calls + spend.estimated_calls,
        )
        return result.model_copy(update={"usage": together})

    def failed(self, exc: Exception) -> TickResult:
        """The result of a tick that raised: its error in its failure class, with the trace."""
        failed_as = failure_class(exc)
        message = failure_message(exc)[:2000]
        if failed_as == "configuration" and not isinstance(
            exc, (MissingEndpointError, AgentMissingError)
        ):
            current = self.walk.current
            named = current.api_key_env if current else None
            api = current.api if current else self.payload.api
            variable = named or API_KEY_ENV_OF[api] or "the target's api_key_env"
            message = f"the upstream refused the API key: check {variable} ({message})"
        error = ResultError(
            type=type(exc).__name__,
            message=message,
            failure_class=failed_as,
            traceback_tail="".join(traceback.format_exception(exc))[-4000:],
        )
        tick_id = self.payload.tick_id
        failed = TickResult(tick_id=tick_id, ok=False, stop_reason="error", error=error)
        return self.with_usage(failed)

    def with_usage(self, result: TickResult) -> TickResult:
        """`result` with what the tick's hooks counted and the target it ended on."""
        spend, budget, current = self.hooks.spend, self.hooks.budget, self.walk.current
        usage = ResultUsage(
            prompt_tokens=spend.prompt_tokens,
            completion_tokens=spend.completion_tokens,
            model_calls=spend.model_calls,
            estimated_calls=spend.estimated_calls,
        )
        tool_calls = ResultToolCalls(executed=budget.executed, cancelled=budget.cancelled)
        target = current.target if current else None
        return result.model_copy(
            update={"usage": usage, "tool_calls": tool_calls, "target": target}
        )
