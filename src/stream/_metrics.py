"""``GET /metrics``: the process's counters and histograms for Prometheus
(``turn._observe.METRICS``, a prometheus-client registry, in the library's text format).

Served only when the ``metrics`` setting is on (otherwise 404), and without auth, like
``/healthz``: it shows totals by status, error code, token kind and tool, never an org,
user or session, but operators should still keep it on a private network.
"""

from __future__ import annotations

from litestar import Response, get
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

from stream._api import ServicesDep
from stream._errors import ApiError
from turn import METRICS


@get("/metrics", summary="Prometheus metrics (when enabled)", include_in_schema=False)
async def metrics(services: ServicesDep) -> Response[bytes]:
    if not services.config.metrics:
        raise ApiError(404, "not_found", "Metrics are off; set BOSUN_METRICS=true to serve them")
    # The library's content type as it is: a media_type would get a second charset.
    return Response(METRICS.render(), headers={"content-type": CONTENT_TYPE_PLAIN_0_0_4})
