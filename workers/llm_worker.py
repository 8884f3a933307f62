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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from harness.collector import pace_collector
from harness.contracts import (
    ResultError,
    TickPayload,
    TickResult,
    redact_standard_streams,
    register_secret_names,
    write_result,
)

EXIT_OK, EXIT_FAILED, EXIT_BAD_PAYLOAD = 0, 1, 2


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
    """Run one tick to its end and write its result file; the exit code is the process's.

    The tick's parts meet here: one hook per concern, the route walk whose candidates a
    `reroute` budget passes over, and the run along the route (`workers.tick_run`).
    """
    # Imported here: a bad payload is answered without paying for the SDK's import.
    from harness.governor import Calibrations
    from workers.budget_guard import BudgetGuard
    from workers.fallback import CandidateWalk
    from workers.governor_hook import ContextGovernor
    from workers.rate_limit import RateLimitGate
    from workers.recorder import EventRecorder
    from workers.spend import SpendMeter
    from workers.telemetry import start_tracing
    from workers.tick_run import RouteRun, TickHooks, tick_tools
    from workers.tool_budget import ToolBudget
    from workers.transcript import Transcript

    register_secret_names(payload.key_variables())
    flush_spans = start_tracing()
    recorder = EventRecorder(payload)
    spend = SpendMeter(payload, recorder)
    walk: CandidateWalk
    daily = BudgetGuard(payload, recorder, lambda: spend.target, lambda: walk.on_last)
    walk = CandidateWalk(payload, recorder, rules_out=daily.spent_for)
    limits = payload.governor
    calibrations = Calibrations(limits.chars_per_token, payload.calibrations, limits.calibrate)
    hooks = TickHooks(
        budget=ToolBudget(payload.max_tool_calls),
        governor=ContextGovernor(payload, recorder, calibrations),
        daily=daily,
        gate=RateLimitGate(payload, recorder),
        transcript=Transcript(payload, recorder),
        spend=spend,
    )
    route = RouteRun(payload, recorder, walk, hooks, tick_tools(payload))
    try:
        hooks.transcript.open()
        result = route.run()
    except Exception as exc:
        result = route.failed(exc)
    finally:
        recorder.close()
        flush_spans()
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
    from harness.store import DRIVER_PRELOAD, load_postgresql_driver, open_store, scratch_sqlite
    from workers.call_booking import CallBooking, CallFacts
    from workers.providers import builder
    from workers.recorder import EventRecorder

    if DRIVER_PRELOAD in preloads:
        load_postgresql_driver()  # the warm-up's own store is a scratch SQLite one
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
    pace_collector()  # before the SDK's imports; a forked tick enters through `serve`
    return serve(sys.stdin.buffer.read())


if __name__ == "__main__":
    code = main()
    # As a forked tick ends: what the tick leaves (result, events, spans) is written by
    # now, and tearing down the SDK's modules would only hold its end for tenths of a second.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
