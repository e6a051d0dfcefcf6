"""A local fake of the Anthropic and OpenAI HTTP APIs, for testing offline.

Start a ``FakeServer`` on 127.0.0.1, script its replies, and point the real SDKs (or a
whole ``bosun serve``, through ``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL``) at it::

    from bosun.testing import FakeProvider, FakeServer, anthropic_reply, anthropic_error

    provider = FakeProvider().enqueue(
        anthropic_error(429, "rate_limit_error", "slow down", retry_after_ms=1),
        anthropic_reply(text="Hello!", usage=TokenUsage(input_tokens=12, output_tokens=3)),
    )
    with FakeServer(provider) as server:
        ...  # ANTHROPIC_BASE_URL=server.url; provider.requests holds what was sent

OpenAI's SDK wants the ``/v1`` in its base URL (``server.url + "/v1"``) and reads request
ids from ``x-request-id``: use ``FakeProvider(request_id_header="x-request-id")``.
``anthropic_reply(..., cache=PromptCache())`` reports cache reads and writes computed from
what each request sent (a repeated prefix is read). A broken stream is
``dataclasses.replace(exchange, cut_after=N)``; recorded transcripts
replay verbatim with ``anthropic_transcript(path)`` / ``openai_transcript(path)``.
"""

from providers._fake_anthropic import (
    PromptCache,
    anthropic_error,
    anthropic_reply,
    anthropic_transcript,
)
from providers._fake_openai import openai_error, openai_reply, openai_transcript
from providers._fake_server import (
    Exchange,
    FakeProvider,
    FakeServer,
    RecordedRequest,
    json_exchange,
    sse_frames,
    transcript_chunks,
)

__all__ = [
    "Exchange",
    "FakeProvider",
    "FakeServer",
    "PromptCache",
    "RecordedRequest",
    "anthropic_error",
    "anthropic_reply",
    "anthropic_transcript",
    "json_exchange",
    "openai_error",
    "openai_reply",
    "openai_transcript",
    "sse_frames",
    "transcript_chunks",
]
