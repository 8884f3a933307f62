"""`/digests/latest`: the last digest any configured digest published."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from harness.api.models import Digest
from harness.api.routes.requests import UNKNOWN, FreshReads

router = APIRouter(tags=["digests"])


@router.get("/digests/latest", responses=UNKNOWN)
def latest_digest(reads: FreshReads) -> Digest:
    """The last published digest and its rendered file."""
    digest = reads.latest_digest()
    if digest is None:
        raise HTTPException(404, "no digest published yet by any of [digests.<name>]")
    return digest
