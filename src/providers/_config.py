"""Provider settings the adapters need: keys, endpoints, retries, timeouts, cache TTL.

A key or URL left unset falls back to the SDK's own environment variable
(``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CacheTTL = Literal["5m", "1h"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderConfig:
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    openai_compatible_api_key: str | None = None
    max_retries: int = 2
    timeout_s: float = 60.0
    cache_ttl: CacheTTL = "5m"
