"""The outbound webhook worker: sends queued deliveries, signed, and retries failures.

Every worker process runs one. It claims due deliveries (``Webhooks.claim_due``: a
conditional update, so racing workers never make one attempt twice), POSTs each with the
Standard Webhooks headers (``webhook-id`` is the delivery's id, the same on every retry),
records the attempt, and schedules the next one after ``retry_s[n - 1]`` seconds or
marks the delivery failed once the schedule is spent. Publishing a notice only inserts
rows and wakes this loop; no turn ever waits on a receiver. Neither URLs, secrets nor
payloads are logged: only ids, status codes and error classes. Every connection goes
through the egress guard (``egress.httpx_client``): a receiver at an internal address is
refused before anything is sent, and its attempt records only the class of the address.

A slow receiver must not delay anyone else's: attempts run concurrently, up to
``max_in_flight`` and ``max_in_flight_per_org``, one at a time per webhook; a finished
attempt frees its slot at once (no waiting for a batch), the claim deals slots out
round-robin across orgs, connecting has its own short timeout, only the status line is
read (never the body), and a webhook that keeps failing has its circuit opened.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
import structlog
from standardwebhooks.webhooks import Webhook

import telemetry
from egress import PUBLIC_ONLY, EgressPolicy, EgressRefused, httpx_client
from store import (
    DELIVERIES_KEY,
    AttemptResult,
    Breaker,
    DueDelivery,
    SecretsKeyError,
    Store,
)

POLL_S = 1.0
"""How often the worker looks for due retries when nothing wakes it."""
CLAIM_MARGIN_S = 30.0
"""A claim outlives its attempt's timeout by this much before another worker may retry."""
_log = structlog.get_logger("bosun.webhooks")


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryLimits:
    """How much of a worker's time one org or webhook can take (``webhooks.*`` settings)."""

    connect_timeout_s: float = 3.0
    max_in_flight: int = 32
    max_in_flight_per_org: int = 4
    breaker: Breaker = field(default_factory=Breaker)


def payload(due: DueDelivery) -> str:
    """The body sent (and signed): Standard Webhooks' ``type``, ``timestamp``, ``data``."""
    body = {
        "type": due.notice_type,
        "timestamp": due.notice_created_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "notice_id": due.notice_id,
        "data": due.notice_data,
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def signed_headers(secret: str, delivery_id: str, body: str) -> dict[str, str]:
    now = datetime.now(UTC)
    return {
        "content-type": "application/json",
        "user-agent": "Bosun-Webhooks/1",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(delivery_id, now, body),
    }


class DeliveryWorker:
    """Sends this process's share of the due webhook deliveries until stopped."""

    def __init__(
        self,
        store: Store,
        *,
        retry_s: Sequence[float],
        timeout_s: float,
        egress: EgressPolicy = PUBLIC_ONLY,
        limits: DeliveryLimits | None = None,
    ) -> None:
        self._store = store
        self._egress = egress
        self._retry_s = tuple(retry_s)
        self._timeout_s = timeout_s
        self._limits = limits or DeliveryLimits()
        self._connect_s = min(self._limits.connect_timeout_s, timeout_s)
        self._deadline_s = timeout_s + self._connect_s
        """The whole attempt's limit: connect, then wait for the answer."""
        self._poll_s = min(POLL_S, *(max(d, 0.05) for d in self._retry_s)) if retry_s else POLL_S
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._sending: dict[asyncio.Task[None], DueDelivery] = {}
        self._freed = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            timeout = httpx.Timeout(self._timeout_s, connect=self._connect_s)
            self._client = httpx_client(self._egress, timeout=timeout)
            self._task = asyncio.create_task(self._loop(), name="webhook-deliveries")

    async def stop(self) -> None:
        """Stop claiming and abandon the attempts under way (their claims lapse, and
        they are made again: at least once)."""
        tasks = [*self._sending, *([self._task] if self._task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _loop(self) -> None:
        with self._store.log.notifier.listen(DELIVERIES_KEY) as wake:
            while True:
                wake.clear()
                self._freed.clear()
                try:
                    claimed = await self.claim()
                except Exception as exc:  # the database is away: try again at the next tick
                    _log.warning("webhook.claim_failed", error_type=type(exc).__name__)
                    claimed = 0
                if claimed and len(self._sending) < self._limits.max_in_flight:
                    continue
                waits = [asyncio.ensure_future(e.wait()) for e in (wake, self._freed)]
                try:
                    await asyncio.wait(waits, timeout=self._poll_s, return_when="FIRST_COMPLETED")
                finally:
                    for waiting in waits:
                        waiting.cancel()

    async def claim(self) -> int:
        """Claim what the free slots allow, fairly, and start an attempt at each; returns
        how many were started."""
        limits = self._limits
        free = limits.max_in_flight - len(self._sending)
        if free <= 0:
            return 0
        sending = self._sending.values()
        due = await self._store.webhooks.claim_due(
            lease_s=self._deadline_s + CLAIM_MARGIN_S,
            limit=free,
            per_org=limits.max_in_flight_per_org,
            busy=Counter(d.org_id for d in sending),
            skip_webhooks={d.webhook_id for d in sending},
        )
        for delivery in due:
            task = asyncio.create_task(self._attempt(delivery), name="webhook-attempt")
            self._sending[task] = delivery
            task.add_done_callback(self._done)
        return len(due)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._sending.pop(task, None)
        self._freed.set()
        if not task.cancelled() and (exc := task.exception()) is not None:
            # unrecorded: retried once the claim lapses
            _log.warning("webhook.record_failed", error_type=type(exc).__name__)

    async def _attempt(self, due: DueDelivery) -> None:
        try:
            secret = self._store.webhooks.secret_of(due)
        except SecretsKeyError:
            result = AttemptResult(status_code=None, error="SecretsKeyError", duration_ms=0)
        else:
            result = await self._post(due, secret)
        retry_at = self._retry_at(due.number, result)
        opened = await self._store.webhooks.finish(
            due, result, retry_at=retry_at, breaker=self._limits.breaker
        )
        _log.info(
            "webhook.attempt",
            webhook_id=due.webhook_id,
            delivery_id=due.id,
            attempt=due.number,
            status_code=result.status_code,
            error_type=result.error,
            retry=retry_at is not None,
        )
        if opened is not None:
            _log.warning("webhook.circuit_open", webhook_id=due.webhook_id, until=opened)

    async def _post(self, due: DueDelivery, secret: str) -> AttemptResult:
        """``_send`` in a ``POST`` client span (when tracing is on), whose ``traceparent``
        the request carries: a receiver's tracing follows the delivery."""
        attributes: telemetry.Attributes = {
            "http.request.method": "POST", "server.address": urlsplit(due.url).hostname or "",
            "bosun.webhook.id": due.webhook_id, "bosun.delivery.id": due.id,
            "bosun.delivery.attempt": due.number, "bosun.notice.type": due.notice_type,
        }  # fmt: skip
        with telemetry.span("POST", attributes, kind="client") as span:
            result = await self._send(due, secret)
            if result.status_code is not None:
                span.set_attribute("http.response.status_code", result.status_code)
            if not result.ok:
                telemetry.fail(span, result.error or str(result.status_code))
            return result

    async def _send(self, due: DueDelivery, secret: str) -> AttemptResult:
        """One POST; only the status line counts, so the body is never read (a receiver
        that trickles or floods one cannot hold the slot). The whole attempt is bounded."""
        assert self._client is not None, "start() the worker first"
        body = payload(due)
        headers = signed_headers(secret, due.id, body)
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._deadline_s):
                request = self._client.stream(
                    "POST", due.url, content=body.encode(), headers=headers
                )
                async with request as response:
                    status: int | None = response.status_code
            error = None
        except (httpx.HTTPError, TimeoutError, EgressRefused) as exc:
            status = None
            error = str(exc) if isinstance(exc, EgressRefused) else type(exc).__name__
        elapsed = int((time.monotonic() - started) * 1000)
        return AttemptResult(status_code=status, error=error, duration_ms=elapsed)

    def _retry_at(self, number: int, result: AttemptResult) -> datetime | None:
        """When attempt ``number + 1`` is due, or ``None``: delivered, or out of retries."""
        if result.ok or number > len(self._retry_s):
            return None
        return datetime.now(UTC) + timedelta(seconds=self._retry_s[number - 1])
