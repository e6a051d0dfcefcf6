"""The ``Model`` adapter for OpenAI chat completions, and for OpenAI-compatible servers.

One adapter serves OpenAI and anything that speaks its chat-completions API (vLLM,
Ollama, llama.cpp, LiteLLM) at another base URL. Mapping lives in ``_openai_request``,
chunk folding in ``_openai_stream``; this module only does I/O and error translation.
Retries are the SDK's own (``ProviderConfig.max_retries``, honouring ``retry-after-ms``
and ``retry-after``); they cover failures before the stream starts, never a stream cut
halfway, which surfaces as ``provider_unavailable`` after the items already yielded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping

import openai
from openai.types.chat import ChatCompletionChunk

from providers._config import ProviderConfig
from providers._errors import code_for, retry_after_s
from providers._model import ModelError, ModelRequest, StreamItem
from providers._openai_request import (
    chat_messages,
    chat_tool_choice,
    chat_tools,
    response_format,
)
from providers._openai_stream import StreamState, completion, fold

_DEFAULT_CONFIG = ProviderConfig()
_MAX_PROVIDER_MESSAGE = 500


class OpenAIModel:
    """Streams replies from OpenAI's chat-completions API or a compatible server.

    ``provider`` only names the model (``openai:gpt-4.1-mini``,
    ``openai-compatible:llama3``) and picks the token-limit parameter: OpenAI gets
    ``max_completion_tokens`` (its reasoning models reject ``max_tokens``), other servers
    get ``max_tokens``, the one they all understand. An unset key or base URL falls back
    to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``. Close with ``aclose()``.
    """

    def __init__(
        self,
        model: str,
        *,
        config: ProviderConfig = _DEFAULT_CONFIG,
        base_url: str | None = None,
        api_key: str | None = None,
        client: openai.AsyncOpenAI | None = None,
        provider: str = "openai",
    ) -> None:
        self._model = model
        self._provider = provider
        self._owns_client = client is None
        if client is None:
            try:
                client = openai.AsyncOpenAI(
                    api_key=api_key or config.openai_api_key,
                    base_url=base_url or config.openai_base_url,
                    max_retries=config.max_retries,
                    timeout=config.timeout_s,
                )
            except openai.OpenAIError as exc:  # no key given and none in the environment
                raise ModelError(
                    "provider_unauthorized",
                    f"No API key for {self.name!r}: set OPENAI_API_KEY or pass api_key",
                ) from exc
        self._client = client

    @property
    def name(self) -> str:
        return f"{self._provider}:{self._model}"

    async def aclose(self) -> None:
        """Close the HTTP client this model created (a client passed in is the caller's)."""
        if self._owns_client:
            await self._client.close()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        chunks = await self._open(request)
        state = StreamState(source=self.name)
        async with chunks:  # closing this generator early closes the HTTP stream
            try:
                async for chunk in chunks:
                    state, items = fold(state, chunk)
                    for item in items:
                        yield item
            except openai.OpenAIError as exc:
                error = _stream_error(exc, state, chunks.response.headers.get("x-request-id"))
                if error is not None:
                    raise error from exc
            except json.JSONDecodeError as exc:
                raise ModelError(
                    "provider_unavailable",
                    f"{self.name} sent a stream event that is not JSON; check that the base "
                    "URL points at an OpenAI-compatible chat-completions API",
                    request_id=chunks.response.headers.get("x-request-id"),
                ) from exc
        yield completion(state, default_model=self._model)

    async def _open(self, request: ModelRequest) -> openai.AsyncStream[ChatCompletionChunk]:
        is_openai = self._provider == "openai"
        schema = request.response_schema
        try:
            return await self._client.chat.completions.create(
                model=self._model,
                messages=chat_messages(request),
                stream=True,
                stream_options={"include_usage": True},
                max_completion_tokens=request.max_tokens if is_openai else openai.omit,
                max_tokens=openai.omit if is_openai else request.max_tokens,
                tools=chat_tools(request.tools) if request.tools else openai.omit,
                # OpenAI rejects a tool_choice without tools.
                tool_choice=chat_tool_choice(request.tool_choice) if request.tools else openai.omit,
                # sent only to turn it off: some compatible servers do not know the field
                parallel_tool_calls=(
                    False if request.tools and not request.parallel_tool_calls else openai.omit
                ),
                response_format=response_format(schema) if schema else openai.omit,
            )
        except openai.OpenAIError as exc:
            raise model_error(exc, self.name) from exc


def _stream_error(
    exc: openai.OpenAIError, state: StreamState, request_id: str | None
) -> ModelError | None:
    """The error for a failure while reading the stream, or None if nothing was lost.

    A connection that drops after the finish and the usage chunk only lost ``[DONE]``:
    the reply is whole, so failing it would only make the caller pay for it twice.
    """
    if isinstance(exc, openai.APITimeoutError) or not isinstance(exc, openai.APIConnectionError):
        return model_error(exc, state.source, request_id=request_id)
    if state.finish_reason is not None and state.usage is not None:
        return None
    return ModelError(
        "provider_unavailable",
        f"The {state.source} stream broke off before the message was complete "
        f"({_cause(exc)}); the reply so far is partial, retry the call",
        request_id=request_id,
    )


def model_error(
    exc: openai.OpenAIError, source: str, *, request_id: str | None = None
) -> ModelError:
    """The ``ModelError`` for an SDK failure.

    HTTP errors are classified by status alone: OpenAI labels a bad key
    ``invalid_request_error``, so its error type would misfile a 401. The type only
    decides for errors sent inside a 200 stream, which have no status.
    """
    match exc:
        case openai.APITimeoutError():
            return ModelError(
                "provider_timeout",
                f"{source} did not answer in time ({exc.request.url.host}); retry, or raise "
                "the provider timeout",
                request_id=request_id,
            )
        case openai.APIConnectionError():
            return ModelError(
                "provider_unavailable",
                f"Could not reach {source} at {exc.request.url.host}:{exc.request.url.port} "
                f"({_cause(exc)}); check the base URL and the network, then retry",
                request_id=request_id,
            )
        case openai.APIStatusError():
            return ModelError(
                code_for(exc.status_code),
                f"{source} answered HTTP {exc.status_code}: {_provider_message(exc)}",
                status=exc.status_code,
                request_id=exc.request_id or request_id,
                retry_after_s=retry_after_s(exc.response.headers),
            )
        case openai.APIResponseValidationError():  # only with _strict_response_validation
            return ModelError(
                "provider_unavailable",
                f"{source} sent data that does not match OpenAI's schema ({exc.message})",
                request_id=request_id,
            )
        case openai.APIError():  # an ``{"error": ...}`` event inside the stream
            return ModelError(
                code_for(None, exc.type),
                f"{source} sent an error inside the stream ({exc.type or 'untyped'}): "
                f"{_provider_message(exc)}",
                request_id=request_id,
            )
        case _:
            return ModelError("provider_unavailable", f"{source} failed: {exc}")


def _provider_message(exc: openai.APIError) -> str:
    body = exc.body
    message = body.get("message") if isinstance(body, Mapping) else None
    text = message if isinstance(message, str) and message else exc.message
    return text[:_MAX_PROVIDER_MESSAGE]


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    return type(cause).__name__ if cause is not None else "connection error"
