"""The first step of a request's path: read it off the ASGI messages and tell what it is.

A chat request (a JSON body with a `messages` list, POSTed to a chat path) is measured
and decided on; anything else is only passed on. Its headers are taken as they came,
less those that describe one connection and not the request.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson
from multidict import CIMultiDict
from starlette.types import Receive, Scope

from harness.contracts.payload import TICK_HEADER

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Headers that describe one connection, not the request: never forwarded as they are."""
DROPPED = frozenset(name.encode() for name in HOP_BY_HOP)
"""The hop-by-hop headers as ASGI names them (bytes, lowercase)."""
DROPPED_FOR_CHAT = DROPPED | {b"accept-encoding"}
"""A chat answer's usage must be readable here, so it is asked for uncompressed."""
TICK_NAME = TICK_HEADER.lower().encode()


@dataclass(frozen=True)
class Incoming:
    """A request as the proxy forwards it; `chat` is its parsed body when it is governed."""

    method: str
    path: str
    query: bytes
    headers: CIMultiDict[str]
    body: bytes
    chat: dict[str, Any] | None
    tick_id: str | None

    def with_body(self, body: bytes) -> Incoming:
        """The same request with another body (the chat with the directive appended)."""
        return replace(self, body=body)

    @property
    def malformed_chat(self) -> bool:
        """A POST to the chat path whose body is no chat request: passed on and counted."""
        return (
            self.chat is None and self.method == "POST" and self.path.endswith("/chat/completions")
        )


def chat_request(method: str, path: str, body: bytes) -> dict[str, Any] | None:
    """The parsed chat request, or None for anything the proxy must only pass on."""
    if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
        return None
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        return None
    return document


async def read_body(receive: Receive) -> bytes | None:
    """The request's body as the server hands it on; None when the client left first."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def incoming(scope: Scope, body: bytes) -> Incoming:
    """The request of `scope` with its body, its chat (if any) and the tick it comes from."""
    method = scope["method"]
    path = scope.get("root_path", "") + scope["path"]
    chat = chat_request(method, path, body)
    drop = DROPPED if chat is None else DROPPED_FOR_CHAT
    tick_id: str | None = None
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in scope["headers"]:
        if name == TICK_NAME:
            tick_id = value.decode("latin-1")
        if name not in drop:
            headers.add(name.decode("latin-1"), value.decode("latin-1"))
    return Incoming(method, path, scope.get("query_string", b""), headers, body, chat, tick_id)
