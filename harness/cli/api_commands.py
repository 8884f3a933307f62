"""`tickwork serve`: the HTTP API, `/metrics` and the dashboard."""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Annotated

import typer

from harness.cli.app import app, err, fail, out, router_or_exit, settings, store_for
from harness.cli.thread_crashes import ThreadCrashes, terminate


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach an address (`localhost` counts)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default: [api] host).")] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port (default: [api] port).")
    ] = None,
) -> None:
    """Serve the HTTP API, /metrics and the dashboard (refuses a public bind without a token)."""
    import uvicorn

    from harness.api import create_app
    from harness.devtools import env_for_ticks
    from harness.execution import ManualTicks
    from harness.store import serve_connections

    config = settings()
    bind = host or config.api.host
    if not is_loopback(bind) and config.api.token is None:
        raise fail(
            f"refusing to serve on {bind}: binding beyond loopback needs a bearer token; "
            "set TICKWORK_API_TOKEN",
            code=2,
        )
    listening = _listen(bind, port or config.api.port)

    def say(line: str) -> None:
        err.print(line, highlight=False)

    server: uvicorn.Server | None = None

    def stop() -> None:
        """The HTTP server finishes the requests in flight; until it runs, SIGTERM ends all."""
        if server is None:
            terminate()
        else:
            server.should_exit = True

    crashes = ThreadCrashes(say, stop)
    crashes.install()
    store = store_for(config, serve_connections(config))
    try:
        where = f"http://{bind}:{port or config.api.port}"
        guarded = "bearer token required" if config.api.token else "no token: loopback only"
        schema = f"{where}/openapi.json"
        out.print(f"tickwork API and dashboard on {where}/ (OpenAPI schema: {schema}; {guarded})")
        manual = ManualTicks(
            config,
            store,
            upstream=lambda: env_for_ticks(say, store),
            router=router_or_exit(config),
            say=say,
        )
        application = create_app(config, store, manual)
        server = uvicorn.Server(uvicorn.Config(application, log_level="warning"))
        server.run(sockets=[listening])
    finally:
        listening.close()
        store.close()
    if crashes.happened.is_set():
        raise typer.Exit(1)


def _listen(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound here so that a taken port is said in one line.

    Left to uvicorn, a second `tickwork serve` on the same port printed uvicorn's error
    and its shutdown lines; bound before anything else starts, it fails as any bad input.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, proto)
    except OSError as exc:
        raise fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}", code=2) from None
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind(address)
        listening.listen(2048)
    except OSError as exc:
        listening.close()
        if exc.errno == errno.EADDRINUSE:
            raise fail(
                f"port {port} on {host} is taken (another `tickwork serve`?): stop it, or "
                "choose another with --port",
                code=1,
            ) from None
        raise fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}", code=1) from None
    return listening
