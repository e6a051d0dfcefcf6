"""The ``Model`` protocol: one async streaming request method, and what goes in and out.

A ``ModelRequest`` (system blocks, ``Message``s, ``ToolSpec``s) goes in; a stream of
``TextChunk``s and ``ToolCall``s ending with one ``Completion`` (stop reason, usage) comes
out, or a ``ModelError`` with a stable code. ``model_from_spec("anthropic:claude-haiku-4-5",
ProviderConfig(...))`` builds a real provider's model; ``bosun.testing`` has the doubles.
"""

from providers import (
    Completion,
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelSpecError,
    ProviderConfig,
    StreamItem,
    SystemBlock,
    TextChunk,
    TokenUsage,
    ToolCall,
    ToolResult,
    ToolSpec,
    model_from_spec,
)

__all__ = [
    "Completion",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelSpecError",
    "ProviderConfig",
    "StreamItem",
    "SystemBlock",
    "TextChunk",
    "TokenUsage",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "model_from_spec",
]
