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

    default: str | None = Field(
        default=None,
        description="Model spec (PROVIDER:MODEL, e.g. anthropic:claude-haiku-4-5) of every "
        "role without its own; unset everywhere: the agent is disabled.",
    )
    planner: str | None = Field(
        default=None, description="Model that triages and plans each turn; else default."
    )
    executor: str | None = Field(
        default=None, description="Model that runs plan steps with tools; else default."
    )
    merger: str | None = Field(
        default=None,
        description="Model that writes answers (merges, direct answers); else default, "
        "else executor.",
    )
    summariser: str | None = Field(
        default=None,
        description="Model that compresses long histories and titles sessions; else default.",
    )
    allowed: list[str] = Field(
        default_factory=list,
        description="Further specs a request may choose: `model` for every answering role "
        "(steps, merge, direct answer), `planner_model` for the planner; else 422 "
        "`model_not_allowed`.",
    )

    def for_role(self, role: ModelRole) -> str | None:
        spec: str | None = getattr(self, role)
        return spec or self.default

    def scripted_only(self) -> bool:
        """Whether every model the server may call is a script (``scripted:PATH``), whose
        token counts are made up."""
        roles = (self.default, self.planner, self.executor, self.merger, self.summariser)
        specs = [spec for spec in (*roles, *self.allowed) if spec]
        return bool(specs) and all(spec.startswith("scripted:") for spec in specs)


class ProviderSettings(BaseModel):
    """Keys and endpoints; unset ones fall back to the SDKs' own environment variables."""

    anthropic_api_key: SecretStr | None = Field(
        default=None, description="Anthropic API key; else the SDK's ANTHROPIC_API_KEY."
    )
    anthropic_base_url: str | None = Field(
        default=None,
        description="Anthropic API endpoint; else ANTHROPIC_BASE_URL, else the SDK's default.",
    )
    openai_api_key: SecretStr | None = Field(
        default=None, description="OpenAI API key; else the SDK's OPENAI_API_KEY."
    )
    openai_base_url: str | None = Field(
        default=None,
        description="OpenAI API endpoint; else OPENAI_BASE_URL, else the SDK's default.",
    )
    openai_compatible_api_key: SecretStr | None = Field(
        default=None,
        description="Key sent to OpenAI-compatible servers (openai-compatible: specs); "
        "else a placeholder, for local servers that need none.",
    )
    max_retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="The SDKs' own retries on 408/409/429/5xx/529, honouring retry-after.",
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Per provider request, in seconds.")
    cache_ttl: Literal["5m", "1h"] = Field(
        default="1h",
        description="Prompt-cache TTL of the stable breakpoints (tools, static system, "
        "the org/user block); Anthropic only.",
    )
    tail_cache_ttl: Literal["5m", "1h"] = Field(
        default="5m",
        description="Prompt-cache TTL of the conversation breakpoints; at most cache_ttl.",
    )

    @model_validator(mode="after")
    def _ttls_in_order(self) -> ProviderSettings:
        if self.cache_ttl == "5m" and self.tail_cache_ttl == "1h":
            raise ValueError(
                "providers.tail_cache_ttl '1h' needs providers.cache_ttl '1h' (Anthropic "
                "wants longer-lived breakpoints first)"
            )
        return self


class PlannerSettings(BaseModel):
    """Bounds of the plans the planner may make (docs/planner.md)."""

    max_steps: int = Field(
        default=5,
        ge=1,
        le=20,
        description="Steps a complex plan may have (at least 2); a plan with more is invalid.",
    )
    max_tool_calls_per_step: int = Field(
        default=10,
        ge=1,
        le=50,
        description="Tool calls a plan may grant one step (more is clamped to this).",
    )
    max_executors: int = Field(
        default=3, ge=1, le=20, description="Steps of a plan that run at once."
    )
    timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="The planner call, in seconds; on timeout (or a provider error, or an "
        "invalid plan) the turn uses the fallback plan.",
    )


class CapSettings(BaseModel):
    """Per-org daily spend caps by tier, in US dollars (``-1``: unmetered), reset at 00:00
    UTC; an org's tier is set with ``bosun org-tier``."""

    default_tier: str = Field(
        default="lite", description="The tier of an org that was given none (one of tiers)."
    )
    tiers: dict[str, float] = Field(
        default_factory=lambda: {"lite": 1.0, "pro": 5.0, "elite": 25.0},
        description="Each tier's daily model spend cap in US dollars (-1: unmetered); at the "
        "cap a turn ends with budget_exceeded.",
    )
    alert_thresholds: list[int] = Field(
        default_factory=lambda: [50, 80, 100],
        description="Percentages of the cap at which a cap.threshold warning is logged, "
        "once per org and day.",
    )

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

    tokens: int = Field(
        default=200_000, ge=0, description="Model tokens (all kinds) a turn's steps may use."
    )
    usd: float = Field(
        default=0.50, ge=0, description="US dollars of model calls a turn's steps may spend."
    )
    tool_calls: int = Field(default=40, ge=0, description="Tool calls a turn's steps may make.")


class WorkerSettings(BaseModel):
    """Several ``bosun serve`` processes on one PostgreSQL: each running turn is leased to
    one worker, renewed every third of ``lease_s``; another worker takes over a turn whose
    lease ran out (its worker died), resuming it from the log."""

    lease_s: float = Field(
        default=15.0,
        ge=1.0,
        le=600.0,
        description="How long a turn's lease lasts unrenewed, in seconds: a dead worker's "
        "turn is taken over after at most this.",
    )


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
        default=20,
        ge=1,
        le=10_000,
        description="Webhooks an org may have; one more is 409 webhook_limit.",
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

    max_tool_calls: int = Field(
        default=10,
        ge=0,
        le=100,
        description="Tool calls one step may make (its plan may allow fewer).",
    )
    wall_time_s: float = Field(
        default=60.0,
        gt=0,
        description="Wall time of one step, in seconds; an answer cut by it ends with "
        "stop_reason time_limit.",
    )
    retries_per_tool: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Failures with one code a tool may have in a step before it is refused.",
    )
    max_model_turns: int = Field(
        default=12,
        ge=1,
        le=100,
        description="Model calls one step may make (Spotter's MAX_TURNS); the last has tools "
        "off, and its answer ends with stop_reason max_model_turns.",
    )
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
    rate_limits: bool = Field(
        default=True,
        description="Hold each agent to its runs_per_minute (else 429 agent_rate_limited); "
        "`serve --dev` with only scripted models turns it off.",
    )


class LimitSettings(BaseModel):
    """Bounds of requests, streams and turns."""

    max_body_bytes: int = Field(
        default=64 * 1024,
        gt=0,
        description="Largest HTTP request body, in bytes (else 413 payload_too_large).",
    )
    max_message_chars: int = Field(
        default=32_000,
        gt=0,
        description="Longest user message, in characters (else 400 invalid_request).",
    )
    keepalive_s: float = Field(
        default=15.0,
        gt=0,
        description="An idle SSE stream gets a `: keep-alive` comment this often, in seconds.",
    )
    turn_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="Wall time of one turn, in seconds; its steps get what is left of it (an "
        "answer they cut ends with stop_reason time_limit); past it the turn fails "
        "(provider_timeout).",
    )
    source_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Per context source fetch, in seconds; a slow or failing source is recorded "
        "and skipped.",
    )
    knowledge_source_tokens: int = Field(
        default=KNOWLEDGE_SOURCE_TOKENS,
        gt=0,
        description="A loaded context source is kept whole up to this many tokens; a longer "
        "one is cut once, when it loads, with a note to the model and a cut in the report.",
    )
    sessions_page_size: int = Field(
        default=50,
        gt=0,
        le=500,
        description="Sessions per page of GET /v1/sessions when the request sets no limit.",
    )
    requests_per_minute: int = Field(
        default=20, ge=0, description="Turns and plans a user may start per minute; 0: no limit."
    )
    tokens_per_minute: int = Field(
        default=30_000,
        ge=0,
        description="Model tokens a user may use per minute; 0: no limit (`serve --dev` with "
        "only scripted models sets 0: their token counts are made up).",
    )
    pending_ttl_s: float = Field(
        default=86_400.0,
        gt=0,
        description="A pending confirmation or pick expires this long after it was asked, in "
        "seconds: the turn ends expired, a late answer is 409 tool_expired.",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BOSUN_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    database_url: str = Field(
        default="sqlite+aiosqlite:///./bosun.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///FILE or "
        "postgresql+asyncpg://USER:PASSWORD@HOST/DB.",
    )
    jwt_secret: SecretStr | None = Field(
        default=None,
        description="Secret that signs and checks bearer tokens; at least 32 bytes "
        "(serve refuses to start without one, unless --dev).",
    )
    secrets_key: SecretStr | None = Field(
        default=None,
        description="Fernet key that encrypts org provider keys, webhook and toolset secrets at "
        "rest (needed to store them); serve --dev makes one in ./.bosun-dev-secrets-key if unset.",
    )
    jwt_algorithm: Literal["HS256", "HS384", "HS512"] = Field(
        default="HS256", description="HMAC algorithm of bearer tokens."
    )
    token_ttl_s: int = Field(
        default=24 * 3600, gt=0, description="Lifetime of tokens `bosun token` prints, in seconds."
    )
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
        description='Toolsets to load: "module:attribute" or an installed entry point\'s name; '
        "none: no tools at all.",
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
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto", description="json, console, or auto (pretty on a terminal, JSON otherwise)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="The least severe log level written."
    )

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
