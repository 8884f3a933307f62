"""The TLS context every protocol's client uses, built once per set of CA variables.

Loading the CA bundle costs about 50 ms of CPU; a forked tick reuses the one its fork
server loaded while warming up.
"""

from __future__ import annotations

import functools
import os
import ssl

import httpx


def ssl_context() -> ssl.SSLContext:
    """The context httpx would build from `SSL_CERT_FILE` and `SSL_CERT_DIR`."""
    return _context_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _context_for(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context()  # reads the same two variables
