"""Provider settings the adapters need: keys, endpoints, retries, timeouts, cache TTLs.

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
    cache_ttl: CacheTTL = "1h"  # the stable marks: tools, static system, org/user block
    tail_cache_ttl: CacheTTL = "5m"  # the conversation marks, which move every call

    def __post_init__(self) -> None:
        # Anthropic rejects a request whose 1-hour breakpoints follow a 5-minute one.
        if self.cache_ttl == "5m" and self.tail_cache_ttl == "1h":
            raise ValueError(
                "tail_cache_ttl '1h' needs cache_ttl '1h': longer-lived breakpoints must "
                "come first in the prompt; raise cache_ttl or lower tail_cache_ttl"
            )
