"""Test your tools and deployments with no network: model doubles, whole turns in this
process, and a fake Anthropic/OpenAI server for the real SDKs.

``FunctionModel`` and ``ScriptedModel`` speak the ``Model`` protocol (``bosun.models``) and
record the requests they got in ``calls`` (a ``ScriptedModel`` keeps each session's place
in its script; ``in_conversation`` gives a block of calls its own); ``run_turn`` runs one
turn with your tools on them and returns its events (``bosun.events``); ``converse`` runs
a whole conversation with your toolset (its tables migrated), as a user who confirms,
rejects, picks, answers and undoes, each step a ``TurnResult``; ``FakeServer`` serves
scripted or recorded replies to the real SDKs (a model from
``bosun.models.model_from_spec`` pointed at it).
"""

from bosun._conversation import ActionRefused, Conversation, converse
from bosun._harness import run_turn
from bosun._views import Pending, ToolRun, TurnResult, UndoResult
from providers import FunctionModel, Reply, ScriptedModel, ScriptExhaustedError, in_conversation
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
    "ActionRefused",
    "Conversation",
    "Exchange",
    "FakeProvider",
    "FakeServer",
    "FunctionModel",
    "Pending",
    "RecordedRequest",
    "Reply",
    "ScriptExhaustedError",
    "ScriptedModel",
    "ToolRun",
    "TurnResult",
    "UndoResult",
    "anthropic_error",
    "anthropic_reply",
    "anthropic_transcript",
    "converse",
    "in_conversation",
    "openai_error",
    "openai_reply",
    "openai_transcript",
    "run_turn",
]
