"""Entry point of a tick process: `python -m workers.llm_worker` with the payload on stdin.

It builds one Strands agent under the tick's caps, runs it once, and writes the result
file the runner chose. Whatever happens, the outcome lands in that file (stdout is never
read); a payload too broken to name its result file is reported on stderr with exit 2.
A cold start enters through `main`; a tick forked from the warm fork server enters
through `serve`, in a process that ran `warm_up` once before it forked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from harness.contracts import (
    API_KEY_ENV_OF,
    ResultError,
    ResultToolCalls,
    ResultUsage,
    TickPayload,
    TickResult,
    keep_environment_private,
    redact_standard_streams,
    register_secret_names,
    write_result,
)

EXIT_OK, EXIT_FAILED, EXIT_BAD_PAYLOAD = 0, 1, 2


class AgentTickError(Exception):
    """An agent CLI's tick failed: its message, for the fallback's record."""


def _payload_error(raw: bytes, exc: ValidationError) -> int:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(payload)'}: {err['msg']}"
        for err in exc.errors()
    )
    message = f"invalid tick payload: {problems}"
    print(message, file=sys.stderr)
    try:
        document: Any = orjson.loads(raw)
        path, tick_id = Path(document["result_path"]), str(document.get("tick_id", "unknown"))
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return EXIT_BAD_PAYLOAD
    error = ResultError(type="PayloadError", message=message, failure_class="internal")
    try:
        write_result(path, TickResult(tick_id=tick_id, ok=False, error=error))
    except (OSError, ValueError) as exc:
        print(f"no result file written to {str(path)!r}: {exc}", file=sys.stderr)
    return EXIT_BAD_PAYLOAD


def run(payload: TickPayload) -> int:
    # Imported here: a bad payload is answered without paying for the SDK's import.
    """Run one tick to its end and write its result file; the exit code is the process's."""
    from strands import Agent, ModelRetryStrategy
    from strands.agent.conversation_manager import NullConversationManager

    from harness.governor import Calibrations
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
    from workers.telemetry import start_tracing
    from workers.tier_tools import tier_tools
    from workers.tool_budget import ToolBudget
    from workers.trace import ToolTrace
    from workers.transcript import Transcript
    from workers.wire import observing

    register_secret_names(payload.key_variables())
    flush_spans = start_tracing()
    recorder = EventRecorder(payload)
    walk = CandidateWalk(payload, recorder)
    budget = ToolBudget(payload.max_tool_calls)
    spend = SpendMeter(payload, recorder)
    daily = BudgetGuard(
        payload, recorder, lambda: spend.target, lambda: walk.index >= len(walk.candidates) - 1
    )
    walk.budget_check = daily.spent_for
    gate = RateLimitGate(payload, recorder)
    transcript = Transcript(payload, recorder)
    limits = payload.governor
    governor = ContextGovernor(
        payload,
        recorder,
        Calibrations(limits.chars_per_token, payload.calibrations, limits.calibrate),
    )
    tools: list[Any] = []
    if payload.rag.enabled:
        tools.append(make_rag_lookup(payload.rag))
    caps = payload.capabilities()
    if caps.shell:
        # Its commands run as this process's user: /proc/<this pid>/environ still shows
        # the variables this process withheld from them (the collector's headers).
        keep_environment_private()
    tools += tier_tools(caps, payload.work_folder())
    result: TickResult

    def agent_on(hooks: list[Any], name: str, own: bool = True) -> Any:
        """An agent on the current candidate; not `own`: no tools, no instructions."""
        return Agent(
            model=spend.model,
            tools=tools if own else [],
            system_prompt=(payload.instructions or None) if own else None,
            callback_handler=None,
            conversation_manager=NullConversationManager(),
            context_manager=False,
            hooks=hooks,
            retry_strategy=ModelRetryStrategy(max_attempts=2, initial_delay=1, max_delay=2),
            name=name,
            trace_attributes={
                "tickwork.tick_id": payload.tick_id,
                "tickwork.level": payload.level,
            },
        )

    def self_check(question: str) -> str | None:
        """The answer, metered and budgeted as the tick's; None when the budget stopped it."""
        answer = str(agent_on([daily, gate, spend], "tickwork-selfcheck", own=False)(question))
        return None if daily.stopped or gate.stopped else answer

    agent_result: TickResult | None = None
    try:
        transcript.open()
        while True:
            chosen = walk.choose()
            kind = chosen.agent if chosen else payload.agent
            if kind != "strands":
                from workers.agents import run_agent_tick

                on_cli = run_agent_tick(kind, payload, chosen, recorder)
                failed = on_cli.error
                if failed is not None and walk.move_on(
                    AgentTickError(failed.message), failed.failure_class
                ):
                    continue  # its calls are in the ledger; the next candidate answers
                agent_result = on_cli
                break
            target = chosen.target if chosen else None
            model = build_model(
                payload, chosen, observing(walk.observe_answer, gate.observe_answer)
            )
            governor.model = spend.use(model, target)
            gate.use(model, target)
            try:
                if chosen is not None:
                    walk.self_check(chosen, self_check)
                hooks = [budget, ToolTrace(payload, recorder), governor, daily, gate, transcript]
                hooks.append(spend)
                agent = agent_on(hooks, f"tickwork-{payload.level}")
                answer = agent(payload.prompt)
                break
            except Exception as exc:
                if not walk.move_on(exc, failure_class(exc)):
                    raise
        if agent_result is not None:
            write_result(payload.result_path, agent_result)
            return EXIT_OK if agent_result.ok else EXIT_FAILED
        text = str(answer).strip()
        stop_reason = "tool_budget" if budget.exhausted else str(answer.stop_reason)
        if governor.stopped:
            stop_reason = "context_limit"
        if daily.stopped:
            stop_reason = "budget"
        if gate.stopped:
            stop_reason = "rate_limit"
        error = None
        value = None
        if not text:
            error = ResultError(
                type="EmptyText", message="the agent ended without text", failure_class="content"
            )
        elif payload.output == "json":
            value, error = structured(text, payload.output_schema)
        result = TickResult(
            tick_id=payload.tick_id,
            ok=error is None,
            text=text,
            value=value,
            stop_reason=stop_reason,
            error=error,
        )
    except Exception as exc:
        tail = "".join(traceback.format_exception(exc))[-4000:]
        failed_as = failure_class(exc)
        message = failure_message(exc)[:2000]
        if failed_as == "configuration" and not isinstance(
            exc, (MissingEndpointError, AgentMissingError)
        ):
            current = walk.current
            api = current.api if current else payload.api
            named = current.api_key_env if current else None
            variable = named or API_KEY_ENV_OF[api] or "the target's api_key_env"
            message = f"the upstream refused the API key: check {variable} ({message})"
        result = TickResult(
            tick_id=payload.tick_id,
            ok=False,
            stop_reason="error",
            error=ResultError(
                type=type(exc).__name__,
                message=message,
                failure_class=failed_as,
                traceback_tail=tail,
            ),
        )
    finally:
        recorder.close()
        flush_spans()
    result = result.model_copy(
        update={
            "usage": ResultUsage(
                prompt_tokens=spend.prompt_tokens,
                completion_tokens=spend.completion_tokens,
                model_calls=spend.model_calls,
                estimated_calls=spend.estimated_calls,
            ),
            "tool_calls": ResultToolCalls(executed=budget.executed, cancelled=budget.cancelled),
            "target": walk.current.target if walk.current else None,
        }
    )
    write_result(payload.result_path, result)
    return EXIT_OK if result.ok else EXIT_FAILED


WARM_UP_UPSTREAM = "http://127.0.0.1:9/v1"
"""The discard port: nothing listens, so the warm-up's model call fails at once."""


def warm_up(preloads: frozenset[str] = frozenset()) -> None:
    """Run one throwaway tick against no upstream, in the fork server before it forks.

    Everything a tick imports and fills on first use (the SDK, the model client, its TLS
    context, the store's SQL, the tools) is then in the server's memory,
    shared by every tick forked from it. `preloads` names what the service's levels use
    (`harness.execution.launchers.preloads_of`): their protocols' SDKs, agent CLIs and
    tools; what none uses stays out of the server (a tick that needs it imports it), so
    a service running one protocol does not spend seconds and megabytes on the others.
    The throwaway tick talks the first preloaded protocol. The tick's store, result and
    log are thrown away; the thread and event loop its agent ran on are gone when it
    returns. A tick opens its store only when it first records, which the failed call
    never does: the budget check (a read) and one event appended after the tick warm the
    store's code. The throwaway stream starts with the `TickStarted` a runner records for
    a real tick: a tick's first record waits for it (up to seconds), and without it the
    server would warm up that long, while every tick it was asked for in the meantime
    started cold.
    """
    import tempfile
    from pathlib import Path

    from harness.contracts import (
        AGENT_CLIS,
        APIS,
        BASE_URL_ENV,
        BudgetRuleData,
        RagSettings,
        TickBudgets,
        TickStarted,
        tick_stream,
    )
    from harness.store import open_store, scratch_sqlite
    from workers.call_booking import CallBooking, CallFacts
    from workers.providers import builder
    from workers.recorder import EventRecorder

    apis = [api for api in APIS if api in preloads] or ["openai-chat"]
    for api in apis:
        builder(api)
    clis = [kind for kind in AGENT_CLIS if kind in preloads]
    if clis:
        from workers.agents import load

        load(clis)  # the agent-CLI frame (its loopback governor) with these CLIs' modules
    tier = "full" if "shell" in preloads else "files" if "file_editor" in preloads else "read"

    with tempfile.TemporaryDirectory(prefix="tickwork-warm-up-") as name:
        folder = Path(name)
        payload = TickPayload(
            tick_id="warm-up",
            level="warm-up",
            prompt="warm up",
            model="warm-up",
            api=apis[0],
            max_tool_calls=1,
            tools=tier,
            web="web_fetch" in preloads,
            rag=RagSettings(enabled=True, index_path=folder / "rag.db"),
            budget=TickBudgets(
                budgets=[
                    BudgetRuleData(
                        name="warm-up",
                        scope="global",
                        window="day",
                        zone="UTC",
                        tokens=1,
                        window_start=datetime(2000, 1, 1, tzinfo=UTC),
                        window_end=datetime(9999, 1, 1, tzinfo=UTC),
                    )
                ],
                after_position=0,
            ),
            result_path=folder / "result.json",
            store_url=scratch_sqlite(folder),
            spool_dir=folder / "spool",
        )
        started = TickStarted(tick_id="warm-up", level="warm-up", pid=os.getpid(), host="")
        store = open_store(payload.store_url)
        store.append(tick_stream("warm-up"), [started.to_record()])
        store.close()
        upstream = BASE_URL_ENV[payload.api]
        os.environ[upstream] = WARM_UP_UPSTREAM
        try:
            logging.disable(logging.CRITICAL)
            run(payload)
            recorder = EventRecorder(payload)
            recorder.record_all(CallBooking.of(payload).ended(CallFacts(model="warm-up", call=1)))
            recorder.close()
        finally:
            logging.disable(logging.NOTSET)
            del os.environ[upstream]


def serve(raw: bytes) -> int:
    """Run the tick whose payload is `raw`; stdout and stderr already go to its log."""
    redact_standard_streams()
    # The root logger's level is WARNING already; setting it again would clear the cache
    # of every logger the SDK made (milliseconds in a forked tick).
    logging.basicConfig(stream=sys.stderr)
    try:
        payload = TickPayload.model_validate_json(raw)
    except ValidationError as exc:
        return _payload_error(raw, exc)
    return run(payload)


def main() -> int:
    """The cold tick process's entry point: the payload on stdin, the result in its file."""
    return serve(sys.stdin.buffer.read())


if __name__ == "__main__":
    code = main()
    # As a forked tick ends: what the tick leaves (result, events, spans) is written by
    # now, and tearing down the SDK's modules would only hold its end for tenths of a second.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
