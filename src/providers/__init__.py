"""Model providers behind one narrow streaming ``Model`` protocol, and test doubles.

``FunctionModel`` and ``ScriptedModel`` test tools and turns with no network (library users
import them, and the fake server, from ``bosun.testing``; the protocol from ``bosun.models``).
``model_from_spec`` builds a model from ``PROVIDER:MODEL`` strings.
"""

from typing import TYPE_CHECKING, Any

from providers._call import Called, call_model
from providers._config import ProviderConfig
from providers._conversation import conversation_key, in_conversation
from providers._model import (
    Completion,
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelSpecError,
    Part,
    ProviderErrorCode,
    ResponseSchema,
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
from providers._prices import PRICES, cost_usd_micros, min_cacheable_tokens
from providers._spec import model_from_spec, provider_of
from providers._testing import (
    SCRIPT_EXHAUSTED,
    FunctionModel,
    Reply,
    ScriptedModel,
    ScriptExhaustedError,
)

if TYPE_CHECKING:
    from providers._anthropic import AnthropicModel


def __getattr__(name: str) -> Any:
    """``AnthropicModel`` on first use: the ``anthropic`` SDK takes about a second to
    import, which a CLI command that calls no model (``bosun token``, ``mcp list``)
    should not pay (``OpenAIModel`` is imported where it is built, likewise)."""
    if name == "AnthropicModel":
        from providers._anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PRICES",
    "SCRIPT_EXHAUSTED",
    "AnthropicModel",
    "Called",
    "Completion",
    "FunctionModel",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelSpecError",
    "Part",
    "ProviderConfig",
    "ProviderErrorCode",
    "Reply",
    "ResponseSchema",
    "ScriptExhaustedError",
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
    "call_model",
    "conversation_key",
    "cost_usd_micros",
    "in_conversation",
    "min_cacheable_tokens",
    "model_from_spec",
    "provider_of",
]
