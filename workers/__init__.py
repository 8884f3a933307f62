"""Code that runs inside a tick subprocess: the worker entry point, its hooks and tools.

It owns the tick process (`python -m workers.llm_worker`): one Strands agent under the
tick's caps, with one hook provider per concern (spend meter, tool budget, tool trace,
context governor), the candidate walk along the tick's route, the recorder of its events
and the `rag_lookup` tool. The runner starts the worker by module name, not by import;
the one thing other parts take from here is how a model call is booked
(`call_booking`), which the runner uses for a call its killed worker left in flight.
Every other module imports the Strands SDK, which only a tick process should pay for:
the front loads a name on first use (`harness.fronts`).
"""

from __future__ import annotations

import typing

from harness import fronts

if typing.TYPE_CHECKING:
    from workers.call_booking import CallBooking, CallFacts, Refusal, cut_off

__getattr__, __all__ = fronts.declared(__name__)
