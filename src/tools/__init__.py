"""Typed tools: registry, policies (category, confirm, inverse, roles), runner, demo toolset."""
