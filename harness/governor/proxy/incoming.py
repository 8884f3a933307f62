"""The first step of a request's path: read it off the ASGI messages and tell what it is.

A model call (POSTed to OpenAI's chat completions or Anthropic's messages, with a body
its API's wire format can read) is measured and decided on; anything else is only passed
on. Its headers are taken as they came (an API key included, which the proxy passes on
and never keeps), less those that describe one connection and not the request.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from multidict import CIMultiDict
from starlette.types import Receive, Scope

from harness.contracts import TICK_HEADER
from harness.governor.proxy.dialects import Body, Dialect, dialect_of, governed

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
    """A request as the proxy forwards it; `chat` is its parsed body when it is governed.

    `dialect` is the API its path belongs to, whose format the proxy's own answers take.
    """

    method: str
    path: str
    query: bytes
    headers: CIMultiDict[str]
    body: bytes
    dialect: Dialect
    chat: Body | None
    tick_id: str | None

    def with_body(self, body: bytes) -> Incoming:
        """The same request with another body (the chat with the directive appended)."""
        return replace(self, body=body)

    @property
    def malformed_chat(self) -> bool:
        """A POST to the chat path whose body is no chat request: passed on and counted."""
        return self.chat is None and governed(self.method, self.path) is not None


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


def path_of(scope: Scope) -> str:
    """The request's path as the upstream gets it."""
    return str(scope.get("root_path", "") + scope["path"])


def incoming(scope: Scope, body: bytes) -> Incoming:
    """The request of `scope` with its body, its chat (if any) and the tick it comes from.

    Raises InvalidRequest for a model call the governor cannot measure and must refuse.
    """
    method = scope["method"]
    path = path_of(scope)
    dialect = governed(method, path)
    chat = dialect.parse(body) if dialect is not None else None
    drop = DROPPED if chat is None else DROPPED_FOR_CHAT
    tick_id: str | None = None
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in scope["headers"]:
        if name == TICK_NAME:
            tick_id = value.decode("latin-1")
        if name not in drop:
            headers.add(name.decode("latin-1"), value.decode("latin-1"))
    query = scope.get("query_string", b"")
    return Incoming(method, path, query, headers, body, dialect or dialect_of(path), chat, tick_id)
