"""Test your tools and deployments with no network: model doubles, whole turns in this
process, and a fake Anthropic/OpenAI server for the real SDKs.

``FunctionModel`` and ``ScriptedModel`` speak the ``Model`` protocol (``bosun.models``) and
record the requests they got in ``calls``; ``run_turn`` runs one turn with your tools on
them and returns its events (``bosun.events``); ``FakeServer`` serves scripted or recorded
replies to the real SDKs (a model from ``bosun.models.model_from_spec`` pointed at it).
"""

from bosun._harness import run_turn
from providers import FunctionModel, Reply, ScriptedModel, ScriptExhaustedError
from providers.fake import (
    Exchange,
    FakeProvider,
    FakeServer,
    RecordedRequest,
    anthropic_error,
    anthropic_reply,
    anthropic_transcript,
    openai_error,
    openai_reply,
    openai_transcript,
)

__all__ = [
    "Exchange",
    "FakeProvider",
    "FakeServer",
    "FunctionModel",
    "RecordedRequest",
    "Reply",
    "ScriptExhaustedError",
    "ScriptedModel",
    "anthropic_error",
    "anthropic_reply",
    "anthropic_transcript",
    "openai_error",
    "openai_reply",
    "openai_transcript",
    "run_turn",
]
