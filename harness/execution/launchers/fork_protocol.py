"""What the warm launcher and its fork server say to each other (both import this)."""

from __future__ import annotations

import json
import struct

READY = b"ready"
"""The server's one message on the control socket: warmed up, frozen, forking."""
DEADLINE = struct.Struct("!d")
"""A fork request on the control socket: the time (epoch seconds) after which the
launcher no longer waits, so a server that wakes up late forks nothing."""
FRAME = struct.Struct("!II")
"""On the tick socket, launcher to child: the environment's and the payload's lengths."""


def encode_request(env: dict[str, str], payload: bytes) -> bytes:
    """What the launcher writes on the tick socket for the child to read."""
    environment = json.dumps(env).encode()
    return FRAME.pack(len(environment), len(payload)) + environment + payload
