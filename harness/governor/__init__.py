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
    from harness.governor.anthropic_wire import MessagesUsageScanner
    from harness.governor.calibration import Calibrations
    from harness.governor.estimate import (
        openai_request_chars,
        request_chars,
        tokens_from_chars,
        wire_request_chars,
    )
    from harness.governor.openai_wire import ChatUsageScanner, ResponsesUsageScanner
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
    from harness.governor.usage import Usage, UsageScanner, priced_apart

__getattr__, __all__ = fronts.declared(__name__)
