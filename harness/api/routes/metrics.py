"""`/metrics`: the read models in Prometheus' text format (`harness.api.metrics`)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from harness.api.metrics import Exposition

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format."""
    exposition: Exposition = request.app.state.exposition
    return Response(exposition.text(), media_type=CONTENT_TYPE_LATEST)
