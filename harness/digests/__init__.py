"""Digests: what a period looked like, built from the log, rendered and published.

It owns the digest's versioned form and its build (`build_digest`), its rendering as
Markdown, HTML or JSON (`render`), and its publication: claimed once per period across
replicas and delivered to files and notifiers. The publication (`Publisher`,
`DigestScheduler`, `Period` in `harness.digests.publish`) is not re-exported, because it
imports apprise; import it from its module where a digest is sent.
"""

from __future__ import annotations

from harness.digests.build import Digest, build_digest
from harness.digests.render import MEDIA_TYPES, DigestFormat, render

__all__ = ["MEDIA_TYPES", "Digest", "DigestFormat", "build_digest", "render"]
