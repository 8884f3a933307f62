"""The context-size governor: a request's size is estimated and held to the limits.

It owns the estimate (characters to tokens), each model's learned chars-per-token,
the one policy that both the tick hook and the proxy apply (pass, soft, defer, hard),
the wire formats it reads (OpenAI chat completions, Anthropic Messages), the operator's
alerts, and the proxy (`harness.governor.proxy`, on aiohttp) with its ledger thread.
Every name is loaded on first use (`harness.fronts`): a tick never needs the proxy, and
importing aiohttp would slow every command that asks the governor anything.
"""

from __future__ import annotations

import typing

from harness import fronts
from harness.contracts import ALERT_URLS_ENV

if typing.TYPE_CHECKING:
    from harness.governor.alerts import Alerts, urls_from_env
    from harness.governor.calibration import Calibrations
    from harness.governor.estimate import (
        openai_request_chars,
        request_chars,
        tokens_from_chars,
        wire_request_chars,
    )
    from harness.governor.policy import Tail, Verdict, decide
    from harness.governor.proxy import Body, Ending
    from harness.governor.proxy.app import Proxy, create_app
    from harness.governor.proxy.dialects import Dialect
    from harness.governor.proxy.incoming import Incoming, read_body
    from harness.governor.proxy.replies import send_answer
    from harness.governor.proxy.state import Judged, ProxyGovernor, proxy_governor
    from harness.governor.proxy.upstream import Upstream
    from harness.governor.rate_limit import await_turn, hold_back, refused_for
    from harness.governor.serving import BackgroundServer
    from harness.governor.usage import Usage, UsageScanner

__all__ = [
    "ALERT_URLS_ENV",
    "Alerts",
    "BackgroundServer",
    "Body",
    "Calibrations",
    "Dialect",
    "Ending",
    "Incoming",
    "Judged",
    "Proxy",
    "ProxyGovernor",
    "Tail",
    "Upstream",
    "Usage",
    "UsageScanner",
    "Verdict",
    "await_turn",
    "create_app",
    "decide",
    "hold_back",
    "openai_request_chars",
    "proxy_governor",
    "read_body",
    "refused_for",
    "request_chars",
    "send_answer",
    "tokens_from_chars",
    "urls_from_env",
    "wire_request_chars",
]

_HOMES = {
    "alerts": (
        "Alerts",
        "urls_from_env",
    ),
    "calibration": ("Calibrations",),
    "estimate": (
        "openai_request_chars",
        "request_chars",
        "tokens_from_chars",
        "wire_request_chars",
    ),
    "policy": (
        "Tail",
        "Verdict",
        "decide",
    ),
    "proxy.app": (
        "Proxy",
        "create_app",
    ),
    "proxy.state": (
        "Judged",
        "ProxyGovernor",
        "proxy_governor",
    ),
    "serving": ("BackgroundServer",),
    "proxy": (
        "Body",
        "Ending",
    ),
    "proxy.dialects": ("Dialect",),
    "proxy.incoming": (
        "Incoming",
        "read_body",
    ),
    "proxy.upstream": ("Upstream",),
    "proxy.replies": ("send_answer",),
    "usage": ("Usage", "UsageScanner"),
    "rate_limit": (
        "await_turn",
        "hold_back",
        "refused_for",
    ),
}
__getattr__ = fronts.names_on_first_use(__name__, _HOMES)
