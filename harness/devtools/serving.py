"""An ASGI app on a real socket in a background thread, for the fake upstream and tests.

It lives with the governor, whose in-tick proxy is served so too.
"""

from harness.governor import BackgroundServer

__all__ = ["BackgroundServer"]
