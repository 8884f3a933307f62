"""A request the governor has to measure but cannot read: the client hears which field."""

from __future__ import annotations


class InvalidRequest(ValueError):
    """A field the governor cannot read (`param`), and why.

    Answered with a 400 in the request's own wire format, before any upstream is asked
    and before anything is recorded.
    """

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message
