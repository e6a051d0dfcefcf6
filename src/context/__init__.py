"""Token counting, per-role budgets, context sources, compression and prompt layout."""

from context._conversation import conversation

__all__ = ["conversation"]
