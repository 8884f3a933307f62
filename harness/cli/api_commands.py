"""`tickwork serve`: the HTTP API, `/metrics` and the dashboard."""

from __future__ import annotations

import errno
import ipaddress
import signal
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.app import (
    app,
    end_on_sigterm,
    err,
    fail,
    out,
    router_or_exit,
    settings,
    state,
    store_for,
)
from harness.cli.thread_crashes import ThreadCrashes, terminate

if TYPE_CHECKING:
    from harness.config import Settings
    from harness.routing import Router


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
    """Serve the HTTP API, /metrics and the dashboard (refuses a public bind without a token).

    SIGHUP or an edit of the file reloads its levels and budgets (and the routing catalog)
    as `tickwork run` does: the API, the dashboard and its run-now buttons follow.
    """
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
    stopping = threading.Event()

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

        router = router_or_exit(config)
        manual = ManualTicks(
            config, store, upstream=lambda: env_for_ticks(say, store), router=router, say=say
        )
        application = create_app(config, store, manual)
        server = uvicorn.Server(uvicorn.Config(application, log_level="warning"))
        _follow_the_file(config, router, say, stopping)
        end_on_sigterm()
        server.run(sockets=[listening])
    finally:
        stopping.set()
        listening.close()
        store.close()
    if crashes.happened.is_set():
        raise typer.Exit(1)


def _follow_the_file(
    config: Settings, router: Router | None, say: Callable[[str], None], stopping: threading.Event
) -> None:
    """Reload the file's levels on SIGHUP or an edit, as `tickwork run` does (no file: none).

    uvicorn handles SIGINT and SIGTERM only, so the SIGHUP handler set here stays.
    """
    from harness.config import config_path
    from harness.scheduling import ServeReload

    path = config_path(state.config)
    if path is None:
        return
    levels = ServeReload(config, path, say, router)

    def reload(*_: object) -> None:
        levels.request()
        if router is not None:
            router.source.request_reload()

    signal.signal(signal.SIGHUP, reload)
    levels.watch(stopping)
    if router is not None:
        router.source.watch(stopping)


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
