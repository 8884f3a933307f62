"""`/metrics`: the read models in Prometheus' text format (`harness.api.metrics`)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from harness.api.metrics import StoreCollector, text_format

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format."""
    families = StoreCollector(request.app.state.reads).collect()
    return Response(text_format(families), media_type=CONTENT_TYPE_LATEST)
