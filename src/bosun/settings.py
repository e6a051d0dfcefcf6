"""Settings from ``BOSUN_*`` environment variables and an optional TOML file.

Precedence: explicit arguments (the CLI's flags) > environment > TOML file > defaults.
Nested groups use a double underscore: ``BOSUN_MODELS__EXECUTOR=scripted:replies.yaml``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from context import KNOWLEDGE_SOURCE_TOKENS, Budgets
from egress import EgressPolicy
from events import ModelRole

DEV_JWT_SECRET = "bosun-dev-secret-do-not-use-in-production"  # noqa: S105 (a known, refused value)
MIN_SECRET_BYTES = 32
ROLE_NAMES: tuple[ModelRole, ...] = get_args(ModelRole)


class ModelSettings(BaseModel):
    """Model spec per role; a role without its own spec uses ``default``."""

    default: str | None = None
    planner: str | None = None
    executor: str | None = None
    merger: str | None = None
    summariser: str | None = None
    allowed: list[str] = Field(
        default_factory=list,
        description="Extra specs a request may choose with its `model` field.",
    )

    def for_role(self, role: ModelRole) -> str | None:
        spec: str | None = getattr(self, role)
        return spec or self.default


class ProviderSettings(BaseModel):
    """Keys and endpoints; unset ones fall back to the SDKs' own environment variables."""

    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    openai_compatible_api_key: SecretStr | None = None
    max_retries: int = Field(default=2, ge=0, le=10)
    timeout_s: float = Field(default=60.0, gt=0)
    cache_ttl: Literal["5m", "1h"] = "5m"


class PlannerSettings(BaseModel):
    max_steps: int = Field(default=5, ge=1, le=20)
    max_tool_calls_per_step: int = Field(default=10, ge=1, le=50)
    max_executors: int = Field(default=3, ge=1, le=20)
    timeout_s: float = Field(default=30.0, gt=0)


class CapSettings(BaseModel):
    """Per-org daily spend caps by tier, in US dollars (``-1``: unmetered), reset at 00:00
    UTC; an org's tier is set with ``bosun org-tier``."""

    default_tier: str = "lite"
    tiers: dict[str, float] = Field(
        default_factory=lambda: {"lite": 1.0, "pro": 5.0, "elite": 25.0}
    )
    alert_thresholds: list[int] = Field(default_factory=lambda: [50, 80, 100])

    @model_validator(mode="after")
    def _consistent(self) -> CapSettings:
        if self.default_tier not in self.tiers:
            raise ValueError(
                f"default_tier {self.default_tier!r} is not one of {sorted(self.tiers)}"
            )
        bad = {t: cap for t, cap in self.tiers.items() if cap < 0 and cap != -1}
        if bad:
            raise ValueError(f"a cap is dollars >= 0, or -1 for unmetered; got {bad}")
        if any(not 0 < pct <= 1000 for pct in self.alert_thresholds):
            raise ValueError("alert thresholds are percentages of the cap, 1-1000")
        return self


class TurnBudgetSettings(BaseModel):
    """What one turn may spend on its plan's steps, split evenly among them (``0``: no
    limit); a step nearing its share is asked to wrap up with what it has."""

    tokens: int = Field(default=200_000, ge=0)
    usd: float = Field(default=0.50, ge=0)
    tool_calls: int = Field(default=40, ge=0)


class WorkerSettings(BaseModel):
    """Several ``bosun serve`` processes on one PostgreSQL: each running turn is leased to
    one worker, renewed every third of ``lease_s``; another worker takes over a turn whose
    lease ran out (its worker died), resuming it from the log."""

    lease_s: float = Field(default=15.0, ge=1.0, le=600.0)


class WebhookSettings(BaseModel):
    """Outbound webhooks (docs/notifications.md): a failed delivery is retried after each
    of ``retry_schedule_s`` in turn (Standard Webhooks' schedule: about a day), then failed.
    The limits keep one org's slow or dead receivers from delaying every other org's."""

    retry_schedule_s: list[float] = Field(
        default_factory=lambda: [5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0],
        max_length=20,
        description="Seconds before each retry after the first attempt; [] never retries.",
    )
    timeout_s: float = Field(default=10.0, gt=0, le=60.0, description="Per attempt.")
    connect_timeout_s: float = Field(
        default=3.0,
        gt=0,
        le=60.0,
        description="Connecting to a receiver (at most timeout_s): a dead host fails fast.",
    )
    max_per_org: int = Field(
        default=20, ge=1, le=10_000, description="Webhooks an org may have (else 409)."
    )
    max_in_flight: int = Field(
        default=32,
        ge=1,
        le=100,  # the HTTP client's connection pool
        description="Attempts this process makes at once.",
    )
    max_in_flight_per_org: int = Field(
        default=4,
        ge=1,
        le=100,
        description="Of those, at most this many for one org: a slow org cannot take them all.",
    )
    breaker_failures: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="Failed attempts in a row that open a webhook's circuit.",
    )
    breaker_cooldown_s: float = Field(
        default=300.0,
        gt=0,
        le=86_400.0,
        description="How long an open circuit holds the webhook's deliveries back.",
    )
    deliver: bool = Field(
        default=True, description="Send deliveries from this process (off: others send them)."
    )

    @field_validator("retry_schedule_s")
    @classmethod
    def _positive(cls, value: list[float]) -> list[float]:
        if any(delay < 0 for delay in value):
            raise ValueError("retry delays are seconds, none negative")
        return value


class McpSettings(BaseModel):
    """MCP servers an org configures as toolsets (docs/mcp.md)."""

    stdio_commands: list[str] = Field(
        default_factory=list,
        description="The programs stdio toolsets may run (exact paths or names, as the "
        "command's first word); empty: stdio toolsets are off. Each runs as this server's user.",
    )
    connect_timeout_s: float = Field(
        default=10.0, gt=0, le=120.0, description="Connecting to a server and listing its tools."
    )
    max_tools_per_toolset: int = Field(
        default=500, ge=1, le=5000, description="Tools offered per toolset; the rest skipped."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_allow_stdio(cls, data: Any) -> Any:
        """``allow_stdio`` let any command run; ``false`` still means off, anything else
        must name the programs instead."""
        if isinstance(data, dict) and "allow_stdio" in data:
            data = dict(data)
            if str(data.pop("allow_stdio")).lower() not in ("false", "0"):
                raise ValueError(
                    "mcp.allow_stdio was replaced by mcp.stdio_commands: list the programs "
                    "stdio toolsets may run (BOSUN_MCP__STDIO_COMMANDS='[\"/usr/bin/x\"]')"
                )
        return data

    @field_validator("stdio_commands")
    @classmethod
    def _programs(cls, value: list[str]) -> list[str]:
        if any(not program.strip() or "\x00" in program for program in value):
            raise ValueError("mcp.stdio_commands names programs: no blank or NUL entries")
        return value

    def stdio_warning(self) -> str | None:
        """What ``bosun serve`` says at start-up when org owners may run programs here."""
        if not self.stdio_commands:
            return None
        return (
            f"WARNING: org owners may run these programs on this host as stdio MCP servers, "
            f"as this service's user (mcp.stdio_commands): {', '.join(self.stdio_commands)}"
        )


class EgressSettings(BaseModel):
    """Where requests made on a tenant's behalf (outbound webhooks, HTTP MCP servers) may
    go: public addresses only, unless opened here (docs/notifications.md#internal-addresses)."""

    allow_private: bool = Field(
        default=False,
        description="Allow every address: loopback, private, link-local (cloud metadata), "
        "CGNAT. Only where every org is trusted with this server's network.",
    )
    allow_loopback: bool = Field(
        default=False,
        description="Allow this machine's loopback addresses only (on with serve --dev).",
    )

    def policy(self) -> EgressPolicy:
        return EgressPolicy(allow_private=self.allow_private, allow_loopback=self.allow_loopback)


class ExecutorSettings(BaseModel):
    """Bounds of each executor's tool loop, and the agent profile's capabilities."""

    max_tool_calls: int = Field(default=10, ge=0, le=100)
    wall_time_s: float = Field(default=60.0, gt=0)
    retries_per_tool: int = Field(default=2, ge=0, le=10)
    max_model_turns: int = Field(default=12, ge=1, le=100)
    allow_tools: list[str] | None = Field(
        default=None, description="Tools the agent may use (names or router.*); all if unset."
    )
    block_tools: list[str] = Field(
        default_factory=list, description="Tools the agent may never use, whatever it asks."
    )


class AgentSettings(BaseModel):
    """The server's bounds on every agent profile (docs/agents.md). Tools no agent may use
    are ``executor.block_tools``."""

    always_allowed: list[str] = Field(
        default_factory=list,
        description="Tools every agent may use whatever its profile grants (names or router.*).",
    )


class LimitSettings(BaseModel):
    max_body_bytes: int = Field(default=64 * 1024, gt=0)
    max_message_chars: int = Field(default=32_000, gt=0)
    keepalive_s: float = Field(default=15.0, gt=0)
    turn_timeout_s: float = Field(default=300.0, gt=0)
    source_timeout_s: float = Field(default=5.0, gt=0)
    knowledge_source_tokens: int = Field(
        default=KNOWLEDGE_SOURCE_TOKENS,
        gt=0,
        description="A loaded context source is kept whole up to this many tokens; a longer "
        "one is cut once, when it loads, with a note to the model and a cut in the report.",
    )
    sessions_page_size: int = Field(default=50, gt=0, le=500)
    requests_per_minute: int = Field(
        default=20, ge=0, description="Turns and plans a user may start per minute; 0: no limit."
    )
    tokens_per_minute: int = Field(
        default=30_000, ge=0, description="Model tokens a user may use per minute; 0: no limit."
    )
    pending_ttl_s: float = Field(
        default=86_400.0,
        gt=0,
        description="A pending confirmation or pick expires this long after it was asked.",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BOSUN_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    database_url: str = "sqlite+aiosqlite:///./bosun.db"
    jwt_secret: SecretStr | None = None
    secrets_key: SecretStr | None = Field(
        default=None, description="Fernet key that encrypts org provider keys at rest."
    )
    jwt_algorithm: Literal["HS256", "HS384", "HS512"] = "HS256"
    token_ttl_s: int = Field(default=24 * 3600, gt=0)
    models: ModelSettings = Field(default_factory=ModelSettings)
    providers: ProviderSettings = Field(default_factory=ProviderSettings)
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    agents: AgentSettings = Field(default_factory=AgentSettings)
    budgets: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="Per-role token budget overrides, e.g. {planner = {conversation = 3000}}.",
    )
    toolsets: list[str] = Field(
        default_factory=list,
        description='Toolsets to load: "module:attribute" or an installed entry point\'s name.',
    )
    demo: bool = Field(default=False, description='Deprecated: the same as toolsets += ["demo"].')
    metrics: bool = Field(
        default=False, description="Serve Prometheus metrics at /metrics (no auth: keep private)."
    )
    limits: LimitSettings = Field(default_factory=LimitSettings)
    caps: CapSettings = Field(default_factory=CapSettings)
    workers: WorkerSettings = Field(default_factory=WorkerSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    egress: EgressSettings = Field(default_factory=EgressSettings)
    turn_budget: TurnBudgetSettings = Field(default_factory=TurnBudgetSettings)
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("budgets")
    @classmethod
    def _known_budgets(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        Budgets.from_mapping(value)  # unknown roles or sections fail here, at start-up
        return value

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lowercase(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=config_file())
        return (init_settings, env_settings, toml)

    def toolset_names(self) -> list[str]:
        """The toolsets to load, in order (``demo = true`` adds the demo, once)."""
        extra = ["demo"] if self.demo and "demo" not in self.toolsets else []
        return [*self.toolsets, *extra]

    def secret_is_safe(self) -> bool:
        if self.jwt_secret is None:
            return False
        value = self.jwt_secret.get_secret_value()
        return value != DEV_JWT_SECRET and len(value.encode()) >= MIN_SECRET_BYTES

    def effective_secret(self) -> str:
        """The signing secret; the known development secret when none is set."""
        return self.jwt_secret.get_secret_value() if self.jwt_secret else DEV_JWT_SECRET


def config_file() -> Path | None:
    """``$BOSUN_CONFIG`` or ``./bosun.toml`` when it exists."""
    named = os.environ.get("BOSUN_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise FileNotFoundError(f"BOSUN_CONFIG names {named!r}, which does not exist")
        return path
    default = Path("bosun.toml")
    return default if default.is_file() else None


def load_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)


_GENERATE = "python3 -c 'import secrets; print(secrets.token_urlsafe(48))'"
UNSAFE_SECRET_HELP = (
    "Refusing to start: BOSUN_JWT_SECRET is unset, too short (< 32 bytes) or the "
    "development value. Set a random one, for example:\n"
    f'  export BOSUN_JWT_SECRET="$({_GENERATE})"\n'
    'or put jwt_secret = "..." in bosun.toml. For local development only, pass --dev.'
)
