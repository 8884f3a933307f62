"""Commands on single ticks and levels: tick, cancel, pause, resume, fake-llm, rag index."""

from __future__ import annotations

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
    store_for,
    upstream_for_ticks,
)

if typing.TYPE_CHECKING:
    from collections.abc import Callable

    from harness.execution import TickOutcome
    from harness.store import SqlEventStore, StoredEvent

INTERRUPTED = "interrupted (Ctrl-C on tickwork tick)"


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
    from harness.contracts import tick_stream
    from harness.execution import ManualTick, TickSetupError, new_tick_id, start_detached
    from harness.projections import tick_story

    config = settings(needed=True)
    router = router_or_exit(config)
    if not wait:
        from harness.devtools import env_for_ticks

        tick_id = new_tick_id(level)
        start_detached(
            config,
            level,
            tick_id=tick_id,
            prompt=prompt,
            timeout=timeout,
            force=force,
            router=router,
            upstream=lambda store: env_for_ticks(lambda line: None, store),
        )
        if as_json:
            print_json({"tick_id": tick_id, "status": "started"})
        else:
            out.print(f"started tick {tick_id} (follow it: tickwork show {tick_id} --follow)")
        return
    store = store_for(config)
    try:
        with upstream_for_ticks(store) as upstream:
            owner = ManualTick(
                config, store, env=upstream.env, router=router, reason=INTERRUPTED, say=err.print
            )
            try:  # a request that cannot run is refused before anything is recorded
                claim = owner.claim(
                    level, prompt=prompt, timeout=timeout, force=force, tick_id=tick_id
                )
            except TickSetupError as exc:
                raise fail(str(exc), code=2) from exc
            with ctrl_c(owner.interrupted, owner.wake):
                outcome = owner.run(claim)
        stream = store.read_stream(tick_stream(claim.tick_id))
        story = tick_story(store, claim.tick_id) if as_json else None
    finally:
        store.close()
    if story is not None:
        print_json(story.model_dump(mode="json"))
    else:
        _print_tick(claim.tick_id, outcome, stream)
    _say_how_past_a_pause(level, outcome)
    if owner.interrupted.is_set():
        raise typer.Exit(130)
    if outcome is None or outcome.status != "completed":
        raise typer.Exit(1)


def _say_how_past_a_pause(level: str, outcome: TickOutcome | None) -> None:
    """A tick the level's pause cancelled: the two ways on, where a bare status said none."""
    from harness.scheduling import PAUSED

    if outcome is not None and outcome.status == "cancelled" and outcome.reason == PAUSED:
        err.print(
            f"level {level!r} is paused: `tickwork resume {level}` lets it run; "
            f"`tickwork tick {level} --force` runs one anyway"
        )


def _print_tick(tick_id: str, outcome: TickOutcome | None, stream: list[StoredEvent]) -> None:
    """The tick's outcome and spend, as `tickwork tick` reports it when the tick has ended."""
    from harness.contracts import TERMINAL_TYPES
    from harness.projections import calls_said, count_calls

    counts = count_calls(stream)
    terminal = next((e for e in reversed(stream) if e.type in TERMINAL_TYPES), None)
    status = outcome.status if outcome else (terminal.type if terminal else "unknown")
    reason = outcome.reason if outcome else (terminal.data.get("reason") if terminal else None)
    out.print(f"tick    {tick_id}")
    out.print(f"status  {status}" + (f" ({reason})" if reason else ""))
    out.print(
        f"tokens  {counts.prompt_tokens:,} prompt + {counts.completion_tokens:,} completion in "
        + calls_said(counts.model_calls, counts.tool_calls, counts.tool_calls_cancelled)
    )
    if outcome is None:
        return
    if outcome.result_path.exists():
        out.print(f"result  {outcome.result_path}")
    if outcome.result is not None and outcome.result.text:
        out.print(outcome.result.text, highlight=False)


@app.command()
def cancel(
    scope: Annotated[
        str | None, typer.Argument(help="A level name, or the start of a tick id.")
    ] = None,
    wait: Annotated[float, typer.Option(min=0, help="Seconds to wait for the ticks to end.")] = 15,
    clear: Annotated[
        bool, typer.Option("--clear", help="End the scope: its ticks may start again.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(help="Record a scope that matches no level and no tick in flight (yet)."),
    ] = False,
    backfill: Annotated[
        str | None,
        typer.Option(help="A backfill's id: claim no more of its slots, cancel its ticks."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a level's ticks in flight and to come, or the ticks in flight a prefix names.

    A level's scope stays in force until `--clear`: queued ticks never start, running
    ones are killed, and ticks claimed later (by any service, or by hand) end cancelled
    before they start. A tick id, or a prefix, cancels the ticks in flight it matches;
    each one's scope ends with its tick. A scope matching neither is refused (exit 2)
    unless `--force`. `--backfill ID` stops a backfill (`tickwork backfill`) instead.
    """
    from harness.contracts import TERMINAL_TYPES
    from harness.scheduling import ScopeError, clear_cancel, operator, refresh
    from harness.scheduling import cancel as cancel_scope

    if (scope is None) == (backfill is None):
        raise fail("name a scope or --backfill ID (one of them)", code=2)
    config = settings(needed=True)
    store = store_for(config)

    def say(line: str) -> None:
        if not as_json:
            out.print(line)

    if backfill is not None:
        _cancel_backfill(store, backfill, say, as_json)
        return
    assert scope is not None

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


def _cancel_backfill(
    store: SqlEventStore, backfill_id: str, say: Callable[[str], None], as_json: bool
) -> None:
    from harness.scheduling import BackfillError, cancel_backfill, operator

    try:
        flying = cancel_backfill(store, backfill_id, operator())
    except BackfillError as exc:
        raise fail(str(exc), code=2) from exc
    finally:
        store.close()
    say(f"backfill {backfill_id} cancelled; its ticks in flight: {', '.join(flying) or 'none'}")
    if as_json:
        print_json({"backfill_id": backfill_id, "cancelled": flying})


@app.command()
def pause(
    level: Annotated[str, typer.Argument(help="The level to stop firing.")],
    reason: Annotated[str, typer.Option(help="Why, for the ledger.")] = "paused by operator",
    note: Annotated[
        str | None, typer.Option(help="A note for whoever resumes it (`tickwork levels` shows it).")
    ] = None,
) -> None:
    """Stop a level's ticks: its slots are recorded as skipped (paused) until resumed."""
    _switch(level, pause=True, reason=reason, note=note)


@app.command()
def resume(level: Annotated[str, typer.Argument(help="The paused level.")]) -> None:
    """Let a paused level fire again (after an infrastructure pause, once it is fixed)."""
    _switch(level, pause=False)


def _switch(
    level: str, *, pause: bool, reason: str = "paused by operator", note: str | None = None
) -> None:
    from harness.scheduling import UnknownLevelError, operator, switch_level

    config = settings(needed=True)
    store = store_for(config)
    try:
        switched = switch_level(
            config, store, level, pause=pause, by=operator(), reason=reason, note=note
        )
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
    """Serve tickwork's fake upstream: OpenAI chat and Responses, Anthropic, Ollama."""
    import uvicorn

    from harness.devtools import create_app

    out.print(
        f"fake upstream on http://{host}:{port} (OpenAI: /v1, Anthropic: /v1/messages, "
        "Ollama: /api/chat; scripts: POST /_script, ledger: GET /_ledger)"
    )
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
