"""Model providers behind one narrow streaming ``Model`` protocol, and test doubles.

``FunctionModel`` and ``ScriptedModel`` are public: use them to test tools and turns with
no network. ``model_from_spec`` builds a model from ``PROVIDER:MODEL`` strings.
"""

from providers._anthropic import AnthropicModel
from providers._config import CacheTTL, ProviderConfig
from providers._errors import code_for
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
from providers._openai import OpenAIModel
from providers._prices import PRICES, Price, cost_usd_micros, price_for
from providers._spec import model_from_spec, provider_of
from providers._testing import (
    FunctionModel,
    Reply,
    ScriptedModel,
    ScriptExhaustedError,
    ScriptStep,
)

__all__ = [
    "PRICES",
    "AnthropicModel",
    "CacheTTL",
    "Completion",
    "FunctionModel",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelSpecError",
    "OpenAIModel",
    "Part",
    "Price",
    "ProviderConfig",
    "ProviderErrorCode",
    "Reply",
    "ResponseSchema",
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
    "code_for",
    "cost_usd_micros",
    "model_from_spec",
    "price_for",
    "provider_of",
]
