"""`tickwork governor`: the context-size guard as an HTTP proxy for OpenAI and Anthropic APIs.

Every request goes to the upstream unchanged (method, path, query, end-to-end headers,
body) and its answer comes back chunk by chunk as it arrives, except model calls (OpenAI
chat completions, Anthropic Messages): those are measured first, and get the wrap-up
directive (soft) or are answered by the governor itself without reaching the upstream
(hard), each in its API's own format (`dialects`). A body that is not a JSON chat request
is passed on untouched; the upstream answers it as it would without the proxy. An
Anthropic body the governor cannot measure is refused, naming the field.

The usage of each answer calibrates the model's chars-per-token ratio and, for clients
that are not ticks, is booked as `BudgetSpent` (source `proxy`) in the same ledger as the
ticks' spend. Requests of ticks (the `X-Tickwork-Tick` header) are governed and
calibrated here but recorded by their own worker, so nothing is counted twice.

A request's path, one module per step, in the order `app.Proxy.forward` takes them:

    incoming   read and parse the request (is it a chat the governor measures?)
    state      decide (the policy's verdict, counters, alerts) and, once the answer
               ended, settle it (calibration, ledger) and write its log line
    upstream   forward it to the upstream on one pooled connection
    replies    send the answer back: whole, relayed as it streams, or the governor's own

A tick's own governor (`workers.agents.tick_governor`) subclasses `Proxy`, `ProxyGovernor`
and `Upstream` from here, for an agent CLI's traffic.
"""

from harness.governor.proxy.app import Proxy, create_app
from harness.governor.proxy.dialects import Body, Dialect
from harness.governor.proxy.incoming import Incoming, read_body
from harness.governor.proxy.replies import send_answer
from harness.governor.proxy.state import Ending, Judged, ProxyGovernor, proxy_governor
from harness.governor.proxy.upstream import Upstream

__all__ = [
    "Body",
    "Dialect",
    "Ending",
    "Incoming",
    "Judged",
    "Proxy",
    "ProxyGovernor",
    "Upstream",
    "create_app",
    "proxy_governor",
    "read_body",
    "send_answer",
]
