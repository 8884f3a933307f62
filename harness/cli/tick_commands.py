"""Commands on single ticks and levels: tick, cancel, pause, resume, fake-llm, rag index."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.app import app, fail, out, rag_app, settings, state, store_for, upstream_for_ticks
from harness.cli.catalog_commands import router_or_exit
from harness.contracts.events import TERMINAL_TYPES
from harness.execution.prepare import Preparer, TickSetupError, new_tick_id
from harness.execution.runner import Runner
from harness.rag import RagError, build_index
from harness.scheduling.control import UnknownLevelError, operator, request_cancel, switch_level
from harness.scheduling.status import refresh


@app.command()
def tick(
    level: Annotated[str, typer.Argument(help="The level to run one tick of.")],
    prompt: Annotated[str | None, typer.Option(help="Instead of the level's prompt.")] = None,
    timeout: Annotated[
        float | None, typer.Option(min=0.1, help="Seconds (default: the level's timeout).")
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait for the tick and print its outcome.")] = True,
    tick_id: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Run one tick now, through the same runner the scheduler uses."""
    config = settings()
    if not wait:
        tick_id = new_tick_id(level)
        command = [sys.argv[0], "tick", level, "--wait", "--tick-id", tick_id]
        if state.config is not None:
            command[1:1] = ["--config", str(state.config)]
        if prompt is not None:
            command += ["--prompt", prompt]
        if timeout is not None:
            command += ["--timeout", str(timeout)]
        subprocess.Popen(
            command,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        out.print(
            f"started tick {tick_id} (follow it: tickwork events --stream tick-{tick_id} --follow)"
        )
        return
    router = router_or_exit(config)
    store = store_for(config)
    try:
        with upstream_for_ticks() as env:
            preparer = Preparer(config, store, env=env, router=router)
            try:
                prepared = preparer.prepare(level, prompt=prompt, timeout=timeout, tick_id=tick_id)
            except TickSetupError as exc:
                raise fail(str(exc), code=2) from exc
            outcome = Runner(config, store, env=env).run(prepared)
        spent = store.read_stream(f"tick-{outcome.tick_id}")
    finally:
        store.close()
    prompt_tokens = sum(e.data["prompt_tokens"] for e in spent if e.type == "BudgetSpent")
    completion_tokens = sum(e.data["completion_tokens"] for e in spent if e.type == "BudgetSpent")
    calls = sum(e.type == "BudgetSpent" for e in spent)
    out.print(f"tick    {outcome.tick_id}")
    reason = f" ({outcome.reason})" if outcome.reason else ""
    out.print(f"status  {outcome.status}{reason}", highlight=False, markup=False)
    out.print(
        f"tokens  {prompt_tokens:,} prompt + {completion_tokens:,} completion in {calls} call(s)"
    )
    out.print(f"result  {outcome.result_path}")
    if outcome.result is not None and outcome.result.text:
        out.print(outcome.result.text, highlight=False, markup=False)
    if outcome.status != "completed":
        raise typer.Exit(1)


@app.command()
def cancel(
    scope: Annotated[str, typer.Argument(help="A level name, or the start of a tick id.")],
    wait: Annotated[float, typer.Option(min=0, help="Seconds to wait for the ticks to end.")] = 15,
) -> None:
    """Cancel ticks in flight: queued ones never start, running ones are killed."""
    config = settings()
    store = store_for(config)
    try:
        refresh(config, store)
        matching = request_cancel(store, scope, by=operator())
        if not matching:
            out.print(f"no tick in flight matches {scope!r}")
            return
        out.print(f"cancelling {len(matching)} tick(s): {', '.join(t.tick_id for t in matching)}")
        deadline = time.monotonic() + wait
        pending = {t.tick_id for t in matching}
        while pending and time.monotonic() < deadline:
            time.sleep(0.5)
            for tick_id in sorted(pending):
                stream = store.read_stream(f"tick-{tick_id}")
                ended = [e.type for e in stream if e.type in TERMINAL_TYPES]
                if ended:
                    pending.discard(tick_id)
                    out.print(f"{tick_id} {ended[-1]}")
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
    config = settings()
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
    config = settings()
    source = folder or config.rag.folder
    if source is None:
        raise fail("no folder given and [rag] folder is not set", code=2)
    try:
        files, chunks = build_index(source, config.rag.index)
    except RagError as exc:
        raise fail(str(exc), code=2) from exc
    out.print(f"indexed {files} file(s), {chunks} passage(s) into {config.rag.index}")
