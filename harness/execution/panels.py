"""Panels: a slot answered by N independent ticks, with one replacement for a lone failure.

The predecessor call layer's rule: a level with `panel = N` runs each slot as N member
ticks (`<slot>-p1` … `-pN`) with the same payload, each a tick of its own (stream,
process group, spend, retries, a place under the caps). When exactly one member of a
panel of two or more fails, exactly one replacement `-pE` runs. The slot's own stream
then records `PanelDecided` with every member's end and its terminal event: completed
when a member completed, with a result file that sets the members' answers side by side
(their texts, and for a JSON level the list of their values), else failed.
"""

from __future__ import annotations

import threading

from harness.contracts import (
    PanelDecided,
    PanelMember,
    TickCompleted,
    TickFailed,
    TickResult,
    write_result,
)
from harness.execution.prepare import PreparedTick
from harness.execution.runner import Runner, TickOutcome

REPLACEMENT = "E"


def member_of(tick: PreparedTick, mark: str) -> PreparedTick:
    """The slot's payload under member `mark`'s tick id, result file and log."""
    return tick.sibling(f"{tick.payload.tick_id}-p{mark}")


class Panel:
    """Runs a slot's members, the replacement if one is due, and records the slot's end."""

    def __init__(self, runner: Runner, tick: PreparedTick, size: int, forced: bool) -> None:
        self.runner = runner
        self.tick = tick
        self.size = size
        self.forced = forced
        self._stopped = threading.Event()

    def run(self) -> TickOutcome:
        """Every member to its end, then the slot's `PanelDecided` and terminal event."""
        outcomes = self._members([str(i) for i in range(1, self.size + 1)])
        failed = [o for o in outcomes if o.status != "completed"]
        if self.size >= 2 and len(failed) == 1 and failed[0].status != "cancelled":
            outcomes += self._members([REPLACEMENT])
        return self._decide(outcomes)

    def _members(self, marks: list[str]) -> list[TickOutcome]:
        """Run members at once and return how each ended.

        The first runs in the slot's own place, the others in places of their own under
        the caps (or end cancelled when none can be had any more).
        """
        found: dict[str, TickOutcome] = {}
        places = self.runner.places
        level = self.tick.payload.level

        def run(member: PreparedTick, own_place: bool) -> None:
            if not own_place and places is not None and not places.enter(level, self._stopped):
                reason = "service stopped before the panel member could start"
                self.runner.cancel_queued(member.payload.tick_id, level, reason)
                return
            try:
                found[member.payload.tick_id] = self.runner.run(member, forced=self.forced)
            finally:
                if not own_place and places is not None:
                    places.release(level)

        members = [member_of(self.tick, mark) for mark in marks]
        threads = [
            threading.Thread(target=run, args=(member, i == 0), name=member.payload.tick_id)
            for i, member in enumerate(members)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [found[m.payload.tick_id] for m in members if m.payload.tick_id in found]

    def _decide(self, outcomes: list[TickOutcome]) -> TickOutcome:
        ref = self.tick.ref
        ids = {"tick_id": ref.tick_id, "level": ref.level}
        members = [
            PanelMember(
                tick_id=o.tick_id,
                status=o.status,
                reason=o.reason,
                result_path=str(o.result_path) if o.result is not None else None,
            )
            for o in outcomes
        ]
        self.runner.record(PanelDecided(**ids, members=members))
        answered = [o for o in outcomes if o.status == "completed" and o.result is not None]
        if not answered:
            reason = f"no member of the panel of {self.size} completed"
            self.runner.record(TickFailed(**ids, reason=reason, failure_class="content"))
            return TickOutcome(
                ref.tick_id, ref.level, "failed", reason, None, ref.result_path, ref.log_path
            )
        side_by_side = TickResult(
            tick_id=ref.tick_id,
            ok=True,
            text="\n\n".join(f"[{o.tick_id}] {o.result.text}" for o in answered if o.result),
            value=[o.result.value for o in answered if o.result]
            if self.tick.payload.output == "json"
            else None,
            stop_reason="panel",
        )
        write_result(ref.result_path, side_by_side)
        self.runner.record(
            TickCompleted(**ids, result_path=str(ref.result_path), stop_reason="panel")
        )
        return TickOutcome(
            ref.tick_id, ref.level, "completed", None, side_by_side, ref.result_path, ref.log_path
        )
