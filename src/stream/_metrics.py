"""``GET /metrics``: the process's counters and histograms for Prometheus (``_observe``).

Served only when the ``metrics`` setting is on (otherwise 404), and without auth, like
``/healthz``: it shows totals by status, error code, token kind and tool, never an org,
user or session, but operators should still keep it on a private network.
"""

from __future__ import annotations

from litestar import Response, get

from stream._api import ServicesDep
from stream._errors import ApiError
from turn._observe import METRICS

CONTENT_TYPE = "text/plain; version=0.0.4"  # Litestar adds "; charset=utf-8"


@get("/metrics", summary="Prometheus metrics (when enabled)", include_in_schema=False)
async def metrics(services: ServicesDep) -> Response[str]:
    if not services.config.metrics:
        raise ApiError(404, "not_found", "Metrics are off; set BOSUN_METRICS=true to serve them")
    return Response(METRICS.render(), media_type=CONTENT_TYPE)
