"""The classes of failure a tick reports, in its result file and in its events.

A module of its own so that the events need not import the result file's models.
"""

from __future__ import annotations

from typing import Literal

FailureClass = Literal["infrastructure", "content", "internal", "configuration"]
"""`configuration`: the upstream refused the tick's credentials (401/403); retrying cannot
help, so the level pauses at once."""
