"""HTTP requests from the tests: httpx's own calls and clients, with one TLS context.

`httpx.get(url)` builds a client for the one request, and the client a TLS context that
reads the CA bundle: 23 ms of CPU here, for an `http://` URL too. The tests poll servers
in loops (is it up yet, has the tick ended), and a sampling profile of a whole suite put
17 s of its active threads' samples in that context. These take the process's one context (the one a
tick's model clients share, `workers.providers.tls`) and are otherwise httpx's: each
request of `get`, `post`, `put` and `stream` still opens and closes its own connection.
"""

from __future__ import annotations

import functools

import httpx

from workers.providers.tls import ssl_context

TLS = ssl_context()

get = functools.partial(httpx.get, verify=TLS)
post = functools.partial(httpx.post, verify=TLS)
put = functools.partial(httpx.put, verify=TLS)
stream = functools.partial(httpx.stream, verify=TLS)
Client = functools.partial(httpx.Client, verify=TLS)
AsyncClient = functools.partial(httpx.AsyncClient, verify=TLS)
