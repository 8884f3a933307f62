"""`tickwork serve`: the HTTP API, `/metrics` and the dashboard."""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

from harness.cli.app import app, err, fail, out, router_or_exit, settings, store_for


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
    store = store_for(config, serve_connections(config))
    try:
        where = f"http://{bind}:{port or config.api.port}"
        guarded = "bearer token required" if config.api.token else "no token: loopback only"
        schema = f"{where}/openapi.json"
        out.print(f"tickwork API and dashboard on {where}/ (OpenAPI schema: {schema}; {guarded})")

        def say(line: str) -> None:
            err.print(line, highlight=False)

        manual = ManualTicks(
            config,
            store,
            upstream=lambda: env_for_ticks(say, store),
            router=router_or_exit(config),
            say=say,
        )
        application = create_app(config, store, manual)
        uvicorn.run(application, host=bind, port=port or config.api.port, log_level="warning")
    finally:
        store.close()
