"""`tickwork governor`: the context-size guard as a proxy in front of OpenAI and Anthropic APIs."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from harness.cli.app import app, end_on_sigterm, fail, out, settings, store_for


@app.command()
def governor(
    upstream: Annotated[
        str | None, typer.Option(help="Base URL to forward to (default: [governor] upstream).")
    ] = None,
    anthropic_upstream: Annotated[
        str | None,
        typer.Option(
            help="Base URL for Anthropic Messages requests "
            "(default: [governor] anthropic_upstream, else the upstream)."
        ),
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: [governor] port).")] = None,
    host: Annotated[str | None, typer.Option(help="Address (default: [governor] host).")] = None,
) -> None:
    """Serve the governor proxy: point agents' OPENAI_BASE_URL or ANTHROPIC_BASE_URL at it."""
    import uvicorn

    from harness.config import GovernorEnvError, with_legacy_env
    from harness.governor import Alerts, create_app, proxy_governor, urls_from_env
    from harness.prices import PriceBook
    from harness.store import Spool

    config = settings()
    try:
        limits = with_legacy_env(config.governor, os.environ)
    except GovernorEnvError as exc:
        raise fail(str(exc), code=2) from exc
    overrides = {
        "upstream": upstream,
        "anthropic_upstream": anthropic_upstream,
        "port": port,
        "host": host,
    }
    limits = limits.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    if not limits.upstream:
        raise fail("no upstream: set [governor] upstream, GOV_UPSTREAM or --upstream", code=2)
    store = store_for(config)
    alerts = Alerts(urls_from_env(os.environ), limits.alert_episode_seconds)
    end_on_sigterm()
    try:
        spool = Spool(config.paths.spool)
        prices = PriceBook(config.prices)
        with proxy_governor(limits, store, spool, alerts, config.rate_limits, prices) as governor:
            out.print(
                f"governor on http://{limits.host}:{limits.port} -> {limits.public_upstream} "
                f"(Anthropic: {limits.public_anthropic_upstream}) "
                f"(soft {limits.soft_tokens:,}, hard {limits.limits().hard or 'off'}; "
                f"status: GET /governor/status)"
            )
            uvicorn.run(
                create_app(governor),
                host=limits.host,
                port=limits.port,
                log_level="warning",
                access_log=False,
                # The upstream's own Date and Server go through; uvicorn's would repeat them.
                server_header=False,
                date_header=False,
                # Nothing here reads the client's address: uvicorn's middleware that
                # rewrites it from X-Forwarded-For was a thirtieth of a request's CPU.
                proxy_headers=False,
            )
    finally:
        store.close()
