"""The Anthropic Messages API behind the ``Model`` protocol.

Request mapping lives in ``_anthropic_request``, event folding in ``_anthropic_stream``;
this module owns the client, the I/O loop and the translation of every SDK failure into
a ``ModelError`` with a stable code. Retries are the SDK's (``max_retries``, honouring
``retry-after``); nothing here retries again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import anthropic
import httpx2
import structlog
from anthropic.types import RawMessageStreamEvent
from anthropic.types.message_create_params import MessageCreateParamsStreaming

from providers._anthropic_request import build_params
from providers._anthropic_stream import StreamState, fold, stop_reason
from providers._config import ProviderConfig
from providers._errors import code_for, retry_after_s
from providers._model import ModelError, ModelRequest, ProviderErrorCode, StreamItem

_log = structlog.get_logger("bosun.providers.anthropic")
_DEFAULT_CONFIG = ProviderConfig()
_MAX_PROVIDER_MESSAGE = 500

_HINTS: dict[ProviderErrorCode, str] = {
    "provider_invalid_request": "check the model name, max_tokens and the conversation layout",
    "provider_unauthorized": "check ANTHROPIC_API_KEY (or anthropic_api_key in the config)",
    "provider_rate_limited": "the SDK's retries ran out; wait, or lower the request rate",
    "provider_overloaded": "Anthropic is overloaded; retry later or pick another model",
    "provider_unavailable": "retry the request later",
    "provider_timeout": "retry, or raise timeout_s in the provider config",
}


class AnthropicModel:
    """Claude through the official ``anthropic`` SDK, streamed.

    ``api_key`` overrides ``config.anthropic_api_key`` (per-organisation keys); an unset
    key or base URL falls back to ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``. Pass
    ``client`` to share one ``AsyncAnthropic`` (and its connection pool) between models;
    otherwise the model builds its own and ``aclose()`` closes it.
    """

    def __init__(
        self,
        model: str,
        *,
        config: ProviderConfig = _DEFAULT_CONFIG,
        api_key: str | None = None,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        self._model = model
        self._config = config
        self._owns_client = client is None
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key or config.anthropic_api_key,
            base_url=config.anthropic_base_url,
            max_retries=config.max_retries,
            timeout=config.timeout_s,
        )

    @property
    def name(self) -> str:
        return f"anthropic:{self._model}"

    async def aclose(self) -> None:
        """Close the HTTP client if this model built it."""
        if self._owns_client:
            await self._client.close()

    async def _open(
        self, params: MessageCreateParamsStreaming
    ) -> anthropic.AsyncStream[RawMessageStreamEvent]:
        try:
            return await self._client.messages.create(**params)
        except TypeError as exc:
            # With no key at all the SDK raises a bare TypeError before sending anything.
            if "authentication method" not in str(exc):
                raise
            raise ModelError(
                "provider_unauthorized",
                "No Anthropic API key is configured; set ANTHROPIC_API_KEY or "
                "anthropic_api_key in the provider config",
            ) from exc

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        params = build_params(
            request,
            model=self._model,
            cache_ttl=self._config.cache_ttl,
            tail_cache_ttl=self._config.tail_cache_ttl,
        )
        schema = request.response_schema
        state = StreamState(model=self._model, schema_tool=schema.name if schema else None)
        try:
            events = await self._open(params)
            async with events:  # closes the HTTP stream when the caller stops early
                async for event in events:
                    state, items = fold(state, event)
                    for item in items:
                        yield item
        except (anthropic.APIError, httpx2.TransportError, json.JSONDecodeError) as exc:
            raise translate_error(exc) from exc
        if not state.done:
            raise ModelError(
                "provider_unavailable",
                "The Anthropic stream ended before the message was complete (no message_stop);"
                " the reply is partial, retry the request",
            )
        if stop_reason(state.raw_stop_reason) != state.raw_stop_reason:
            _log.warning(
                "anthropic.stop_reason_mapped",
                stop_reason=state.raw_stop_reason,
                reported_as=stop_reason(state.raw_stop_reason),
            )


def translate_error(exc: Exception) -> ModelError:
    """The ``ModelError`` for a failure of the SDK or of the connection under it.

    A mid-stream ``event: error`` arrives as an ``APIStatusError`` carrying the 200 of the
    response it interrupted, so the error *type* decides the code; such errors get
    ``status=None``. Cut streams surface as raw ``httpx2`` errors, which the SDK does not
    wrap once the stream has started.
    """
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(exc)
    code: ProviderErrorCode
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        code, what = "provider_timeout", "did not answer in time"
    elif isinstance(exc, anthropic.APIConnectionError):
        code, what = "provider_unavailable", "could not be reached"
    elif isinstance(exc, httpx2.TransportError):
        code, what = "provider_unavailable", f"stream broke off ({type(exc).__name__})"
    else:  # a malformed event or response body
        code, what = "provider_unavailable", f"sent a reply the SDK could not read ({exc})"
    return ModelError(code, f"Anthropic {what}; {_HINTS[code]}")


def _status_error(exc: anthropic.APIStatusError) -> ModelError:
    in_stream = exc.status_code < 400  # an `event: error` inside a 200 stream
    code = code_for(None if in_stream else exc.status_code, exc.type)
    what = (
        f"reported {exc.type or 'an error'} in the middle of the reply stream"
        if in_stream
        else f"returned HTTP {exc.status_code} ({exc.type or 'no error type'})"
    )
    return ModelError(
        code,
        f"Anthropic {what}: {_provider_message(exc)}; {_HINTS[code]}",
        status=None if in_stream else exc.status_code,
        request_id=exc.request_id,
        retry_after_s=None if in_stream else retry_after_s(exc.response.headers),
    )


def _provider_message(exc: anthropic.APIStatusError) -> str:
    """Anthropic's own explanation (it names request fields, not their contents), capped."""
    message = exc.api_message or "no message"
    if len(message) > _MAX_PROVIDER_MESSAGE:
        return message[: _MAX_PROVIDER_MESSAGE - 3] + "..."
    return message
