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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import httpx
import structlog
from standardwebhooks.webhooks import Webhook

from egress import PUBLIC_ONLY, EgressPolicy, EgressRefused, httpx_client
from store import DELIVERIES_KEY, AttemptResult, DueDelivery, SecretsKeyError, Store

POLL_S = 1.0
"""How often the worker looks for due retries when nothing wakes it."""
CLAIM_MARGIN_S = 30.0
"""A claim outlives its attempt's timeout by this much before another worker may retry."""
BATCH = 20
_log = structlog.get_logger("bosun.webhooks")


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
    ) -> None:
        self._store = store
        self._egress = egress
        self._retry_s = tuple(retry_s)
        self._timeout_s = timeout_s
        self._poll_s = min(POLL_S, *(max(d, 0.05) for d in self._retry_s)) if retry_s else POLL_S
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None

    def start(self) -> None:
        if self._task is None:
            self._client = httpx_client(self._egress, timeout=self._timeout_s)
            self._task = asyncio.create_task(self._loop(), name="webhook-deliveries")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _loop(self) -> None:
        with self._store.log.notifier.listen(DELIVERIES_KEY) as wake:
            while True:
                wake.clear()
                try:
                    sent = await self.run_once()
                except Exception as exc:  # the database is away: try again at the next tick
                    _log.warning("webhook.claim_failed", error_type=type(exc).__name__)
                    sent = 0
                if sent:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=self._poll_s)

    async def run_once(self) -> int:
        """Claim the due deliveries and make one attempt at each; returns how many."""
        lease_s = self._timeout_s + CLAIM_MARGIN_S
        due = await self._store.webhooks.claim_due(lease_s=lease_s, limit=BATCH)
        outcomes = await asyncio.gather(*(self._attempt(d) for d in due), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):  # unrecorded: retried once the claim lapses
                _log.warning("webhook.record_failed", error_type=type(outcome).__name__)
        return len(due)

    async def _attempt(self, due: DueDelivery) -> None:
        try:
            secret = self._store.webhooks.secret_of(due)
        except SecretsKeyError:
            result = AttemptResult(status_code=None, error="SecretsKeyError", duration_ms=0)
        else:
            result = await self._post(due, secret)
        retry_at = self._retry_at(due.number, result)
        await self._store.webhooks.finish(due, result, retry_at=retry_at)
        _log.info(
            "webhook.attempt",
            webhook_id=due.webhook_id,
            delivery_id=due.id,
            attempt=due.number,
            status_code=result.status_code,
            error_type=result.error,
            retry=retry_at is not None,
        )

    async def _post(self, due: DueDelivery, secret: str) -> AttemptResult:
        assert self._client is not None, "start() the worker first"
        body = payload(due)
        started = time.monotonic()
        try:
            response = await self._client.post(
                due.url, content=body.encode(), headers=signed_headers(secret, due.id, body)
            )
        except (httpx.HTTPError, EgressRefused) as exc:
            elapsed = int((time.monotonic() - started) * 1000)
            error = str(exc) if isinstance(exc, EgressRefused) else type(exc).__name__
            return AttemptResult(status_code=None, error=error, duration_ms=elapsed)
        elapsed = int((time.monotonic() - started) * 1000)
        return AttemptResult(status_code=response.status_code, error=None, duration_ms=elapsed)

    def _retry_at(self, number: int, result: AttemptResult) -> datetime | None:
        """When attempt ``number + 1`` is due, or ``None``: delivered, or out of retries."""
        if result.ok or number > len(self._retry_s):
            return None
        return datetime.now(UTC) + timedelta(seconds=self._retry_s[number - 1])
