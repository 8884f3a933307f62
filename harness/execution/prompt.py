"""A level's prompt, rendered with the tick's context.

Templates use `$level`, `$slot` (ISO time of the slot, or "now" for a tick run by hand)
and `$previous_result` (the text of the level's last completed tick). `string.Template`
leaves any other `$` and all braces alone, so prompts may hold JSON or code.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from string import Template

from harness.contracts.result import ResultFileError, read_result
from harness.projections import Projector
from harness.projections.ticks import previous_result_path
from harness.store import SqlEventStore


def previous_result_text(store: SqlEventStore, projector: Projector, level: str) -> str:
    projector.catch_up(["ticks"])
    with store.read_transaction() as conn:
        path = previous_result_path(conn, level)
    if not path:
        return ""
    try:
        return read_result(Path(path)).text
    except ResultFileError:
        return ""


def render(template: str, level: str, slot: datetime | None, previous: str) -> str:
    context = {
        "level": level,
        "slot": slot.isoformat() if slot else "now",
        "previous_result": previous,
    }
    return Template(template).safe_substitute(context)
