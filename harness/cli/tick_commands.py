"""Commands on single ticks and levels: tick, cancel, pause, resume, fake-llm, rag index."""

from __future__ import annotations

import contextlib
import threading
import time
import typing
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.app import (
    JsonOption,
    app,
    ctrl_c,
    err,
    fail,
    out,
    print_json,
    rag_app,
    router_or_exit,
    settings,
    state,
    store_for,
    upstream_for_ticks,
)

if typing.TYPE_CHECKING:
    from harness.execution.executors import LocalExecutor
    from harness.execution.runner import TickOutcome
    from harness.scheduling.waves import SlotClaim
    from harness.store import EventStore, StoredEvent

FOREVER = 7 * 24 * 3600.0
"""How long `tickwork tick` waits for its tick: its own deadline and retries end it first."""


@app.command()
def tick(
    level: Annotated[str, typer.Argument(help="The level to run one tick of.")],
    prompt: Annotated[str | None, typer.Option(help="Instead of the level's prompt.")] = None,
    timeout: Annotated[
        float | None, typer.Option(min=0.1, help="Seconds (default: the level's timeout).")
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait for the tick and print its outcome.")] = True,
    force: Annotated[
        bool, typer.Option(help="Run even if the level is paused or over its budget.")
    ] = False,
    as_json: JsonOption = False,
    tick_id: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Run one tick now, in the manual lane, through the lifecycle the scheduler's ticks have.

    It obeys the level's pause and budget unless `--force` (recorded with the tick), and
    ends cancelled on `tickwork cancel` from anywhere or on Ctrl-C here. While it waits,
    a line on stderr tells each model and tool call as it ends, with the tokens so far.
    """
    from harness.contracts.events import tick_stream
    from harness.execution.executors import LocalExecutor
    from harness.execution.launchers import ColdLauncher
    from harness.execution.manual import start_detached
    from harness.execution.prepare import Preparer, TickSetupError, new_tick_id
    from harness.execution.runner import Runner
    from harness.projections.story import tick_story
    from harness.scheduling.waves import Manual, SlotClaim, claim_wave

    config = settings(needed=True)
    if not wait:
        tick_id = new_tick_id(level)
        start_detached(
            level, tick_id, config=state.config, prompt=prompt, timeout=timeout, force=force
        )
        if as_json:
            print_json({"tick_id": tick_id, "status": "started"})
        else:
            out.print(f"started tick {tick_id} (follow it: tickwork show {tick_id} --follow)")
        return
    router = router_or_exit(config)
    store = store_for(config)
    interrupted = threading.Event()
    try:
        with upstream_for_ticks(store) as upstream:
            env = upstream.env
            preparer = Preparer(config, store, env=env, router=router)
            try:  # a request that cannot run is refused before anything is recorded
                prepared = preparer.prepare(level, prompt=prompt, timeout=timeout, tick_id=tick_id)
            except TickSetupError as exc:
                raise fail(str(exc), code=2) from exc
            manual = Manual(prompt, timeout, force)
            claim = SlotClaim(
                prepared.payload.tick_id, level, None, routed=prepared.routed, manual=manual
            )
            outcomes: list[TickOutcome] = []
            # One tick, then the process ends: a fork server's warm-up would cost more than
            # the cold start it saves.
            runner = Runner(config, store, ColdLauncher(), env=env)
            executor = LocalExecutor(config, preparer, runner, lambda line: None, outcomes.append)
            claim_wave(store, config, [claim])
            _own(store, executor, claim, interrupted)
        stream = store.read_stream(tick_stream(claim.tick_id))
        story = tick_story(store, claim.tick_id) if as_json else None
    finally:
        store.close()
    if story is not None:
        print_json(story.model_dump(mode="json"))
    else:
        _print_tick(claim.tick_id, outcomes[0] if outcomes else None, stream)
    _say_how_past_a_pause(level, outcomes)
    if interrupted.is_set():
        raise typer.Exit(130)
    if not outcomes or outcomes[0].status != "completed":
        raise typer.Exit(1)


def _say_how_past_a_pause(level: str, outcomes: list[TickOutcome]) -> None:
    """A tick the level's pause cancelled: the two ways on, where a bare status said none."""
    from harness.scheduling.control import PAUSED

    if outcomes and outcomes[0].status == "cancelled" and outcomes[0].reason == PAUSED:
        err.print(
            f"level {level!r} is paused: `tickwork resume {level}` lets it run; "
            f"`tickwork tick {level} --force` runs one anyway"
        )


def _own(
    store: EventStore, executor: LocalExecutor, claim: SlotClaim, interrupted: threading.Event
) -> None:
    """Run the tick to its end, following the control stream; Ctrl-C cancels it."""
    from harness.scheduling.control import ControlFollower
    from harness.scheduling.timetable import POLL_SECONDS
    from harness.store import StoreError

    ended, wake = threading.Event(), threading.Event()
    follower = ControlFollower(store, executor, executor.settings.levels)
    progress = Progress(store, claim.tick_id)

    def follow() -> None:
        while not ended.is_set():
            with contextlib.suppress(StoreError):
                progress.poll()
            if interrupted.is_set():
                executor.cancel(
                    lambda level, tick_id: True, "interrupted (Ctrl-C on tickwork tick)"
                )
            with contextlib.suppress(StoreError):  # the runner spools; the next poll asks again
                follower.poll()
            wake.wait(POLL_SECONDS)
            wake.clear()

    following = threading.Thread(target=follow, name="control", daemon=True)
    with ctrl_c(interrupted, wake):
        following.start()
        try:
            if not _await_place(store, executor, claim, interrupted, wake):
                return
            executor.submit(claim)
            executor.wait_idle(FOREVER)
        finally:
            ended.set()
            wake.set()
            following.join()
            executor.shutdown(grace=0)


class Progress:
    """Counts a running tick's model and tool calls from its stream, and says when they change."""

    def __init__(self, store: EventStore, tick_id: str) -> None:
        from harness.contracts.events import tick_stream

        self.store = store
        self.stream = tick_stream(tick_id)
        self.after = 0
        self.model_calls = self.tool_calls = self.tokens = 0
        self.started = time.monotonic()

    def poll(self) -> None:
        """Read what the tick recorded since the last poll; one stderr line if calls ended."""
        batch = self.store.read_stream(self.stream, after=self.after)
        if not batch:
            return
        self.after = batch[-1].stream_position
        calls = (self.model_calls, self.tool_calls)
        for event in batch:
            if event.type == "ModelCalled":
                self.model_calls += 1
            elif event.type == "ToolCalled":
                self.tool_calls += 1
            elif event.type == "BudgetSpent":
                self.tokens += event.data["prompt_tokens"] + event.data["completion_tokens"]
        if (self.model_calls, self.tool_calls) != calls:
            err.print(
                f"... {time.monotonic() - self.started:.1f} s: {self.model_calls} model call(s), "
                f"{self.tokens:,} tokens, {self.tool_calls} tool call(s) so far"
            )


def _await_place(
    store: EventStore,
    executor: LocalExecutor,
    claim: SlotClaim,
    interrupted: threading.Event,
    wake: threading.Event,
) -> bool:
    """Wait until the manual lane has a place for the tick across every process.

    False when Ctrl-C came first: the tick is then ended cancelled without starting.
    """
    from harness.projections import Projector
    from harness.projections.ticks import TicksProjection
    from harness.scheduling.manual import manual_ticks_ahead
    from harness.scheduling.timetable import POLL_SECONDS
    from harness.store import StoreError

    projector = Projector(store, [TicksProjection()])
    cap = executor.settings.runner.manual_max_concurrent
    told = False
    while not interrupted.is_set():
        try:
            ahead = manual_ticks_ahead(store, projector, claim.tick_id)
        except StoreError:
            ahead = cap  # unknown: ask again after the poll
        if ahead < cap:
            return True
        if not told:
            err.print(f"waiting: {ahead} manual tick(s) ahead of this one hold the lane's {cap}")
            told = True
        wake.wait(POLL_SECONDS)
        wake.clear()
    executor.never_started(claim, "interrupted (Ctrl-C on tickwork tick)")
    return False


def _print_tick(tick_id: str, outcome: TickOutcome | None, stream: list[StoredEvent]) -> None:
    """The tick's outcome and spend, as `tickwork tick` reports it when the tick has ended."""
    from harness.contracts.events import TERMINAL_TYPES

    spent = [e.data for e in stream if e.type == "BudgetSpent"]
    prompt_tokens = sum(data["prompt_tokens"] for data in spent)
    completion_tokens = sum(data["completion_tokens"] for data in spent)
    terminal = next((e for e in reversed(stream) if e.type in TERMINAL_TYPES), None)
    status = outcome.status if outcome else (terminal.type if terminal else "unknown")
    reason = outcome.reason if outcome else (terminal.data.get("reason") if terminal else None)
    out.print(f"tick    {tick_id}")
    out.print(f"status  {status}" + (f" ({reason})" if reason else ""))
    calls = len(spent)
    out.print(
        f"tokens  {prompt_tokens:,} prompt + {completion_tokens:,} completion in {calls} call(s)"
    )
    if outcome is None:
        return
    if outcome.result_path.exists():
        out.print(f"result  {outcome.result_path}")
    if outcome.result is not None and outcome.result.text:
        out.print(outcome.result.text, highlight=False)


@app.command()
def cancel(
    scope: Annotated[str, typer.Argument(help="A level name, or the start of a tick id.")],
    wait: Annotated[float, typer.Option(min=0, help="Seconds to wait for the ticks to end.")] = 15,
    clear: Annotated[
        bool, typer.Option("--clear", help="End the scope: its ticks may start again.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(help="Record a scope that matches no level and no tick in flight (yet)."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Cancel a level's ticks in flight and to come, or the ticks in flight a prefix names.

    A level's scope stays in force until `--clear`: queued ticks never start, running
    ones are killed, and ticks claimed later (by any service, or by hand) end cancelled
    before they start. A tick id, or a prefix, cancels the ticks in flight it matches;
    each one's scope ends with its tick. A scope matching neither is refused (exit 2)
    unless `--force`.
    """
    from harness.contracts.events import TERMINAL_TYPES
    from harness.scheduling.control import ScopeError, clear_cancel, operator
    from harness.scheduling.control import cancel as cancel_scope
    from harness.scheduling.status import refresh

    config = settings(needed=True)
    store = store_for(config)

    def say(line: str) -> None:
        if not as_json:
            out.print(line)

    try:
        if clear:
            cleared = clear_cancel(store, scope, by=operator())
            say(f"scope {scope!r} " + ("cleared" if cleared else "was not in force"))
            if as_json:
                print_json({"scope": scope, "cleared": cleared})
            return
        refresh(config, store)
        try:
            scopes, matching = cancel_scope(store, scope, operator(), config.levels, force)
        except ScopeError as exc:
            raise fail(str(exc), code=2) from exc
        if scopes == [scope] and (force or scope in config.levels):
            say(f"scope {scope!r} in force until `tickwork cancel --clear {scope}`")
        ended: dict[str, str] = {}
        pending = {t.tick_id for t in matching}
        if not matching:
            say(f"no tick in flight matches {scope!r}")
        else:
            say(f"cancelling {len(matching)} tick(s): {', '.join(t.tick_id for t in matching)}")
        deadline = time.monotonic() + wait
        while pending and time.monotonic() < deadline:
            time.sleep(0.5)
            for tick_id in sorted(pending):
                stream = store.read_stream(f"tick-{tick_id}")
                terminal = [e.type for e in stream if e.type in TERMINAL_TYPES]
                if terminal:
                    pending.discard(tick_id)
                    ended[tick_id] = terminal[-1]
                    say(f"{tick_id} {terminal[-1]}")
        if as_json:
            print_json(
                {
                    "scope": scope,
                    "scopes": scopes,
                    "matching": [t.tick_id for t in matching],
                    "ended": ended,
                    "still_in_flight": sorted(pending),
                }
            )
        if pending:
            still = ", ".join(sorted(pending))
            raise fail(f"still in flight after {wait:.0f} s: {still} (is `tickwork run` up?)")
    finally:
        store.close()


@app.command()
def pause(
    level: Annotated[str, typer.Argument(help="The level to stop firing.")],
    reason: Annotated[str, typer.Option(help="Why, for the ledger.")] = "paused by operator",
) -> None:
    """Stop a level's ticks: its slots are recorded as skipped (paused) until resumed."""
    _switch(level, pause=True, reason=reason)


@app.command()
def resume(level: Annotated[str, typer.Argument(help="The paused level.")]) -> None:
    """Let a paused level fire again (after an infrastructure pause, once it is fixed)."""
    _switch(level, pause=False)


def _switch(level: str, *, pause: bool, reason: str = "paused by operator") -> None:
    from harness.scheduling.control import UnknownLevelError, operator, switch_level

    config = settings(needed=True)
    store = store_for(config)
    try:
        switched = switch_level(config, store, level, pause=pause, by=operator(), reason=reason)
    except UnknownLevelError as exc:
        raise fail(str(exc), code=2) from exc
    finally:
        store.close()
    before = "paused" if switched.was_paused else "running"
    out.print(f"{level}: {before} -> {'paused' if switched.paused else 'running'}")


@app.command("fake-llm")
def fake_llm(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8099,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
) -> None:
    """Serve tickwork's fake OpenAI-compatible upstream (scripts: POST /_script)."""
    import uvicorn

    from harness.devtools.fake_llm import create_app

    out.print(f"fake upstream on http://{host}:{port}/v1 (ledger: GET /_ledger)")
    uvicorn.run(create_app(), host=host, port=port, log_level="warning")


@rag_app.command("index")
def rag_index(
    folder: Annotated[Path | None, typer.Argument(help="Default: [rag] folder.")] = None,
) -> None:
    """Index a folder of Markdown and text files for the rag_lookup tool."""
    from harness.rag import RagError, build_index

    config = settings()
    source = folder or config.rag.folder
    if source is None:
        raise fail("no folder given and [rag] folder is not set", code=2)
    try:
        files, chunks = build_index(source, config.rag.index)
    except RagError as exc:
        raise fail(str(exc), code=2) from exc
    out.print(f"indexed {files} file(s), {chunks} passage(s) into {config.rag.index}")
