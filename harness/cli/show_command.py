"""`tickwork show`: what a tick did and why it ended, or, with --follow, what it does now."""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.app import (
    JsonOption,
    app,
    ctrl_c,
    fail,
    out,
    print_json,
    settings,
    store_for,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import date

    from harness.config import Settings
    from harness.projections import StoryStep, TickSpend, TickStory
    from harness.store import EventStore

FOLLOW_POLL_SECONDS = 0.3
"""How often `--follow` reads the tick's stream: a turn shows up within this."""

INDENT = " " * 10
CANDIDATES = 10
"""Ids named at most when a prefix is ambiguous."""


def print_step(step: StoryStep) -> None:
    """One step as people read it: time and summary, then any arguments and text indented."""
    out.print(f"{step.at:%H:%M:%S}  {step.summary}", highlight=False)
    if step.arguments is not None:
        out.print(f"{INDENT}args {step.arguments}", highlight=False)
    if step.text:
        for line in step.text.splitlines():
            out.print(f"{INDENT}| {line}", highlight=False)


def print_story_head(story: TickStory) -> None:
    """The tick at a glance: where it stands and what it spent."""
    from harness.projections import calls_said

    where = (story.model or "?") + (f" via {story.target}" if story.target else "")
    rows = [
        ("tick", story.tick_id),
        ("level", story.level or "?"),
        ("status", story.status + (f" ({story.reason})" if story.reason else "")),
        ("model", where),
        ("waited", _waited(story.queue_wait_seconds)),
        ("config", _revision(story.config_revision)),
        (
            "spent",
            f"{story.prompt_tokens:,} + {story.completion_tokens:,} tokens in "
            + calls_said(story.model_calls, story.tool_calls, story.tool_calls_cancelled)
            + f", {story.attempts} attempt(s)",
        ),
        ("result", story.result_path or "-"),
        ("log", story.log_path or "-"),
    ]
    if story.now is not None:
        rows.insert(3, ("now", story.now.words(datetime.now(UTC))))
    for name, value in rows:
        out.print(f"{name:<8}{value}", highlight=False)


def _revision(revision: str | None) -> str:
    """The levels' revision the tick was claimed under, as `tickwork status` shows it."""
    return "-" if revision is None else f"levels revision {revision[:12]}"


def _waited(seconds: float | None) -> str:
    """The queue wait as the story head shows it."""
    if seconds is None:
        return "-"
    return f"{seconds:,.1f} s from claim to start"


def where_archived(config: Settings, tick_id: str, day: date) -> str:
    """Where an archived tick went and how to read it back, for `show` and `events` to name."""
    from harness.store import EVENTS_FILE, day_folder

    events_file = day_folder(config.retention.archive, day) / EVENTS_FILE
    return (
        f"was archived with {day}: {events_file} (tickwork show {tick_id} --archive reads it back)"
    )


def archived_story(
    store: EventStore, config: Settings, tick_id: str, read_back: bool
) -> TickStory | None:
    """The story of a tick that left for an archive, read back there when asked (else exit 0).

    None when no archive holds a tick of that id (`find_archived`).
    """
    from harness.projections import story_of
    from harness.store import ArchiveError, find_archived

    try:
        found = find_archived(store, config.retention.archive, tick_id)
    except ArchiveError as exc:
        raise fail(str(exc), code=2) from exc
    if found is None:
        return None
    day, events = found
    if not read_back:
        out.print(f"tick {tick_id} {where_archived(config, tick_id, day)}", highlight=False)
        raise typer.Exit(0)
    return story_of(tick_id, events)


def with_archived_transcript(
    store: EventStore, config: Settings, story: TickStory, read_back: bool
) -> tuple[TickStory, str | None]:
    """A hot tick's story with its transcript read back from its archive (`read_back`).

    Without `read_back`, the story as the store holds it, and a line that says where the
    transcript went when it left before the tick (`[retention] transcript_days`).
    """
    from harness.contracts import tick_stream
    from harness.projections import story_of
    from harness.store import (
        TRANSCRIPTS_FILE,
        ArchiveError,
        archived_on,
        day_folder,
        read_transcript,
    )

    day = archived_on(store, story.tick_id)
    if day is None:
        return story, None
    folder = day_folder(config.retention.archive, day)
    if not read_back:
        return story, (
            f"transcript archived with {day}: {folder / TRANSCRIPTS_FILE} "
            f"(tickwork show {story.tick_id} --archive reads it back)"
        )
    stream = tick_stream(story.tick_id)
    try:
        entries = read_transcript(folder, stream)
    except ArchiveError as exc:
        raise fail(str(exc), code=2) from exc
    events = sorted([*store.read_stream(stream), *entries], key=lambda e: e.stream_position)
    return story_of(story.tick_id, events), None


def print_story_end(story: TickStory, note: str | None = None) -> None:
    """What the tick left: its result text (or why there is none), its log's tail, and `note`."""
    if story.result_error:
        out.print(f"\nresult error: {story.result_error}", highlight=False)
    if story.result_text:
        out.print("\n--- result text ---", highlight=False)
        out.print(story.result_text, highlight=False)
    if story.log_tail and story.log_tail.strip():
        out.print("\n--- log (end) ---", highlight=False)
        out.print(story.log_tail.rstrip(), highlight=False)
    if note:
        out.print(f"\n{note}", highlight=False)


@app.command()
def show(
    tick_id: Annotated[
        str, typer.Argument(metavar="TICK", help="The tick's id, or a prefix unique to it.")
    ],
    follow: Annotated[
        bool, typer.Option(help="Print a running tick's turns as they happen, until it ends.")
    ] = False,
    as_json: JsonOption = False,
    archive: Annotated[
        bool, typer.Option("--archive", help="Read an archived tick back from its archive.")
    ] = False,
    spend: Annotated[
        bool,
        typer.Option(
            "--spend",
            help="Why it cost what it did: per call its tokens and cost, how the input grew, "
            "and which tool results added the most input to the calls after them.",
        ),
    ] = False,
) -> None:
    """A tick's story: model and tool calls with their text, how it ended, result and log.

    A tick older than `[retention] hot_days` has left the store for its day's archive: it
    says which, and `--archive` reads its story from there.

    `--json` prints the story (`harness.projections.story.TickStory`); with `--follow`,
    each step as one line while the tick runs, then the story without its steps. With
    `--spend`, the tick's calls and costs instead (`harness.projections.TickSpend`).
    """
    if not follow:
        from harness.cli.answered import answer_or_read

        arguments = {"tick_id": tick_id, "as_json": as_json, "archive": archive, "spend": spend}
        answer_or_read("show", arguments)
        return
    config = settings()
    store = store_for(config)
    try:
        tick_id, story, note = found_story(store, config, tick_id, archive)
        with ctrl_c() as stop:
            story = follow_tick(store, tick_id, as_json, stop)
    finally:
        store.close()
    if as_json:
        story.steps = []
        sys.stdout.write(story.model_dump_json() + "\n")
        return
    out.print()
    print_story_head(story)
    print_story_end(story, note)


def print_show(
    config: Settings, store: EventStore, tick_id: str, as_json: bool, archive: bool, spend: bool
) -> None:
    """What `tickwork show` prints of a tick (not following it), read from `store`."""
    if spend:
        show_spend(store, config, tick_id, as_json)
        return
    _, story, note = found_story(store, config, tick_id, archive)
    if as_json:
        print_json(story.model_dump(mode="json"))
        return
    print_story_head(story)
    out.print()
    for step in story.steps:
        print_step(step)
    print_story_end(story, note)


def found_story(
    store: EventStore, config: Settings, tick_id: str, archive: bool
) -> tuple[str, TickStory, str | None]:
    """The tick `tick_id` (or the one prefix) names, its story, and where its transcript went.

    Exits 2 when no tick, hot or archived, has that id.
    """
    from harness.projections import tick_story

    story = tick_story(store, tick_id)
    if story is None:
        tick_id = unique_tick(store, config, tick_id)
        story = tick_story(store, tick_id)
    note = None
    if story is None:
        story = archived_story(store, config, tick_id, archive)
    else:
        story, note = with_archived_transcript(store, config, story, archive)
    if story is None:
        raise fail(f"no tick {tick_id!r} in the store (ids: tickwork events)", code=2)
    return tick_id, story, note


def show_spend(store: EventStore, config: Settings, tick_id: str, as_json: bool) -> None:
    """`show --spend`: the tick's calls with their parts and USD, and what grew its input."""
    from harness.contracts import tick_stream
    from harness.projections import spend_per_call
    from harness.routing import price_book

    events = store.read_stream(tick_stream(tick_id))
    if not events:
        tick_id = unique_tick(store, config, tick_id)
        events = store.read_stream(tick_stream(tick_id))
    if not events:
        raise fail(f"no tick {tick_id!r} in the store (ids: tickwork events)", code=2)
    spent = spend_per_call(tick_id, events, price_book(config))
    if as_json:
        print_json(spent.model_dump(mode="json"))
        return
    print_spend(spent)


SPEND_WIDTHS = (4, 8, 9, 9, 9, 9, 9, 8, 9, 8, 11, 11)
"""The widths of the per-call table's columns (`harness.projections.call_spend.SPEND_COLUMNS`);
the model stands last, as it varies in length."""


def _row(cells: Iterable[str]) -> str:
    """Cells right-aligned in the spend table's columns."""
    return "  ".join(f"{cell:>{width}}" for cell, width in zip(cells, SPEND_WIDTHS, strict=True))


def print_spend(spent: TickSpend) -> None:
    """The calls as a table, the tool results ranked by the input they added, the method."""
    from harness.projections import SPEND_COLUMNS, usd_words

    calls = f"{len(spent.calls)} model call(s)"
    out.print(f"tick {spent.tick_id}: {calls}, {usd_words(spent)}", highlight=False)
    out.print()
    out.print(f"{_row(SPEND_COLUMNS)}  model", highlight=False)
    for call in spent.calls:
        cells = call.cells()
        flag = " (estimated: no usage reported)" if call.estimated else ""
        flag += " (on a subscription: billed 0)" if call.billing == "subscription" else ""
        out.print(f"{_row(cells)}  {call.model}{flag}", highlight=False)
        if call.tool_results:
            after = ", ".join(call.tool_results)
            out.print(f"{INDENT}after tool results: {after}", highlight=False)
    out.print()
    if not spent.tool_results:
        out.print("no tool result grew the input of a later call", highlight=False)
    else:
        out.print("tool results by the input they added to the calls after them:", highlight=False)
        for tool in spent.tool_results:
            out.print(
                f"  {tool.added:>9,} tokens  {tool.tool} (after call {tool.after_call}: "
                f"{tool.share:,} tokens, sent again by {tool.later_calls} call(s))",
                highlight=False,
            )
    out.print()
    out.print(f"how: {spent.method}", highlight=False)


def unique_tick(store: EventStore, config: Settings, prefix: str) -> str:
    """The one tick whose id begins with `prefix`; exit 2 naming them when there are several.

    The ticks read model is caught up first, so a tick claimed a moment ago is found.
    Returns `prefix` itself when no tick matches (the caller says so).
    """
    from harness.prices import PriceBook
    from harness.projections import projector_for, tick_ids_starting

    projector_for(store, PriceBook(config.prices)).catch_up(["ticks"])
    found = tick_ids_starting(store, prefix, CANDIDATES + 1)
    if len(found) > 1:
        more = " …" if len(found) > CANDIDATES else ""
        named = ", ".join(found[:CANDIDATES]) + more
        raise fail(f"tick prefix {prefix!r} is ambiguous: {named}", code=2)
    return found[0] if found else prefix


def follow_tick(store: EventStore, tick_id: str, as_json: bool, stop: threading.Event) -> TickStory:
    """Print the tick's steps as they are recorded until its terminal event or `stop`.

    Returns the story so far: a whole one, or a running tick's when stopped (Ctrl-C).

    A call's spend and its `ModelCalled` are appended in one commit, so a step that the
    model call will fold away is never printed first.
    """
    from harness.contracts import tick_stream
    from harness.projections import story_of, story_steps

    stream = tick_stream(tick_id)
    events = store.read_stream(stream)
    shown = 0
    while True:
        story = story_of(tick_id, events)
        steps = [s for s in story_steps(events) if s.position > shown]
        for step in steps:
            if as_json:
                sys.stdout.write(step.model_dump_json() + "\n")
                sys.stdout.flush()
            else:
                print_step(step)
            shown = step.position
        if story.ended or stop.wait(FOLLOW_POLL_SECONDS):
            return story
        events += store.read_stream(stream, after=events[-1].stream_position)
