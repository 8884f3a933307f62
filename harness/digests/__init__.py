"""Digests: what a period looked like, built from the log, rendered and published.

It owns the digest's versioned form and its build (`build_digest`), its rendering as
Markdown, HTML or JSON (`render`), and its publication: claimed once per period across
replicas and delivered to files and notifiers (`Publisher`, `DigestScheduler`, `Period`).

All but the rendering are loaded on first use (`harness.fronts`): building needs the read
models and the store, publishing imports apprise, and `tickwork --help` names the digest
formats without either. `render` stays an import of its own: it is its submodule's name
too, and a loaded submodule would shadow a function served on first use.
"""

from __future__ import annotations

import typing

from harness import fronts
from harness.digests.render import MEDIA_TYPES, DigestFormat, render

if typing.TYPE_CHECKING:
    from harness.digests.build import Digest, build_digest
    from harness.digests.publish import DigestScheduler, Period, Publisher

__getattr__, __all__ = fronts.declared(__name__)
