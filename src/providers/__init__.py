"""Model providers behind one narrow streaming ``Model`` protocol, and test doubles.

``FunctionModel`` and ``ScriptedModel`` are public: use them to test tools and turns with
no network. ``model_from_spec`` builds a model from ``PROVIDER:MODEL`` strings.
"""

from providers._model import (
    Completion,
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelSpecError,
    Part,
    ProviderErrorCode,
    StopReason,
    StreamItem,
    SystemBlock,
    TextChunk,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from providers._spec import model_from_spec
from providers._testing import (
    FunctionModel,
    Reply,
    ScriptedModel,
    ScriptExhaustedError,
    ScriptStep,
)

__all__ = [
    "Completion",
    "FunctionModel",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelSpecError",
    "Part",
    "ProviderErrorCode",
    "Reply",
    "ScriptExhaustedError",
    "ScriptStep",
    "ScriptedModel",
    "StopReason",
    "StreamItem",
    "SystemBlock",
    "TextChunk",
    "TextPart",
    "TokenUsage",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "model_from_spec",
]
