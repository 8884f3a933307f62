"""The context-size governor: a request's size is estimated and held to the limits.

It owns the estimate (characters to tokens), each model's learned chars-per-token,
the one policy that both the tick hook and the proxy apply (pass, soft, defer, hard),
the wire formats it reads (OpenAI chat completions, Anthropic Messages), and the
operator's alerts. The proxy
(`harness.governor.proxy`, on aiohttp) and its ledger thread are not re-exported: a
tick never needs them, and importing aiohttp would slow every command that imports the
governor; import them from their modules.
"""

from __future__ import annotations

from harness.contracts.secrets import ALERT_URLS_ENV
from harness.governor.alerts import Alerts, urls_from_env
from harness.governor.calibration import Calibrations
from harness.governor.estimate import (
    openai_request_chars,
    request_chars,
    tokens_from_chars,
    wire_request_chars,
)
from harness.governor.policy import Tail, Verdict, decide

__all__ = [
    "ALERT_URLS_ENV",
    "Alerts",
    "Calibrations",
    "Tail",
    "Verdict",
    "decide",
    "openai_request_chars",
    "request_chars",
    "tokens_from_chars",
    "urls_from_env",
    "wire_request_chars",
]
