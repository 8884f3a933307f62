"""Digests: what a period looked like, built from the log, rendered and published.

It owns the digest's versioned form and its build (`build_digest`), its rendering as
Markdown, HTML or JSON (`render`), and its publication: claimed once per period across
replicas and delivered to files and notifiers. The publication (`Publisher`,
`DigestScheduler`, `Period` in `harness.digests.publish`) is not re-exported, because it
imports apprise; import it from its module where a digest is sent.

`Digest` and `build_digest` are loaded on first use (PEP 562): building needs the read
models and the store, and `tickwork --help` names the digest formats without either.
"""

from __future__ import annotations

import typing

from harness.digests.render import MEDIA_TYPES, DigestFormat, render

if typing.TYPE_CHECKING:
    from harness.digests.build import Digest, build_digest

__all__ = ["MEDIA_TYPES", "Digest", "DigestFormat", "build_digest", "render"]

_BUILT = ("Digest", "build_digest")


def __getattr__(name: str) -> object:
    """The build's names, imported when first asked for."""
    if name in _BUILT:
        from harness.digests import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
