"""Settings: defaults, ``BOSUN_*`` environment, TOML file, model roles and the JWT secret."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from pydantic import ValidationError

from bosun.app import stream_config
from bosun.settings import (
    DEV_JWT_SECRET,
    ModelSettings,
    Settings,
    config_file,
    load_settings,
)
from store import Breaker
from stream import DeliveryLimits


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ``BOSUN_*`` variable from the outer environment, and no stray ./bosun.toml."""
    for name in list(os.environ):
        if name.upper().startswith("BOSUN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _write_toml(tmp_path: Path, text: str, name: str = "custom.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults() -> None:
    settings = load_settings()

    assert settings.database_url == "sqlite+aiosqlite:///./bosun.db"
    assert settings.jwt_secret is None
    assert settings.jwt_algorithm == "HS256"
    assert settings.token_ttl_s == 24 * 3600
    assert settings.models == ModelSettings()
    assert settings.models.for_role("executor") is None
    assert settings.limits.max_body_bytes == 64 * 1024
    assert settings.limits.sessions_page_size == 50
    assert settings.log_format == "auto"
    assert settings.log_level == "info"
    assert config_file() is None


def test_environment_overrides_with_bosun_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOSUN_DATABASE_URL", "postgresql+asyncpg://u:p@db/bosun")
    monkeypatch.setenv("BOSUN_TOKEN_TTL_S", "60")
    monkeypatch.setenv("BOSUN_LOG_FORMAT", "json")
    monkeypatch.setenv("BOSUN_MODELS__EXECUTOR", "scripted:replies.yaml")
    monkeypatch.setenv("BOSUN_LIMITS__KEEPALIVE_S", "2.5")
    monkeypatch.setenv("DATABASE_URL", "sqlite:///unprefixed-is-ignored.db")

    settings = load_settings()

    assert settings.database_url == "postgresql+asyncpg://u:p@db/bosun"
    assert settings.token_ttl_s == 60
    assert settings.log_format == "json"
    assert settings.models.executor == "scripted:replies.yaml"
    assert settings.models.planner is None
    assert settings.limits.keepalive_s == 2.5
    assert settings.limits.max_body_bytes == 64 * 1024


def test_invalid_environment_value_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOSUN_TOKEN_TTL_S", "0")

    with pytest.raises(ValidationError, match="token_ttl_s"):
        load_settings()


def test_explicit_arguments_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOSUN_DATABASE_URL", "sqlite+aiosqlite:///env.db")

    settings = load_settings(database_url="sqlite+aiosqlite:///flag.db")

    assert settings.database_url == "sqlite+aiosqlite:///flag.db"


def test_toml_file_named_by_bosun_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _write_toml(
        tmp_path,
        'database_url = "sqlite+aiosqlite:///toml.db"\n'
        'log_level = "debug"\n'
        "[models]\n"
        'default = "scripted:default.yaml"\n'
        'planner = "scripted:planner.yaml"\n'
        "[limits]\n"
        "sessions_page_size = 10\n",
    )
    monkeypatch.setenv("BOSUN_CONFIG", str(path))

    settings = load_settings()

    assert config_file() == path
    assert settings.database_url == "sqlite+aiosqlite:///toml.db"
    assert settings.log_level == "debug"
    assert settings.models.default == "scripted:default.yaml"
    assert settings.models.planner == "scripted:planner.yaml"
    assert settings.limits.sessions_page_size == 10
    assert settings.limits.max_message_chars == 32_000


def test_environment_beats_toml_including_nested_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = _write_toml(
        tmp_path,
        'database_url = "sqlite+aiosqlite:///toml.db"\n'
        'log_level = "debug"\n'
        "[models]\n"
        'default = "scripted:default.yaml"\n'
        'executor = "scripted:toml-executor.yaml"\n',
    )
    monkeypatch.setenv("BOSUN_CONFIG", str(path))
    monkeypatch.setenv("BOSUN_DATABASE_URL", "sqlite+aiosqlite:///env.db")
    monkeypatch.setenv("BOSUN_MODELS__EXECUTOR", "scripted:env-executor.yaml")

    settings = load_settings()

    assert settings.database_url == "sqlite+aiosqlite:///env.db"
    assert settings.log_level == "debug"  # only in TOML
    assert settings.models.executor == "scripted:env-executor.yaml"
    assert settings.models.default == "scripted:default.yaml"  # TOML's sibling key survives


def test_bosun_toml_in_the_working_directory_is_read(tmp_path: Path) -> None:
    _write_toml(tmp_path, 'log_format = "console"\n', name="bosun.toml")

    settings = load_settings()

    assert config_file() == Path("bosun.toml")
    assert settings.log_format == "console"


def test_unknown_toml_key_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _write_toml(tmp_path, 'databse_url = "typo"\n')
    monkeypatch.setenv("BOSUN_CONFIG", str(path))

    with pytest.raises(ValidationError, match="databse_url"):
        load_settings()


def test_bosun_config_naming_a_missing_file_raises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "absent.toml"
    monkeypatch.setenv("BOSUN_CONFIG", str(missing))

    with pytest.raises(FileNotFoundError, match=r"BOSUN_CONFIG names .*absent\.toml"):
        load_settings()


def test_for_role_falls_back_to_default() -> None:
    models = ModelSettings(default="scripted:all.yaml", executor="scripted:exec.yaml")

    assert models.for_role("executor") == "scripted:exec.yaml"
    assert models.for_role("planner") == "scripted:all.yaml"
    assert models.for_role("merger") == "scripted:all.yaml"
    assert models.for_role("summariser") == "scripted:all.yaml"
    assert ModelSettings(planner="scripted:p.yaml").for_role("executor") is None
    assert ModelSettings(default="d", planner="").for_role("planner") == "d"


@pytest.mark.parametrize(
    "secret",
    [
        None,
        "",
        "short",
        "x" * 31,
        "é" * 15,  # 30 bytes in UTF-8
        DEV_JWT_SECRET,
    ],
    ids=["unset", "empty", "short", "31-bytes", "30-utf8-bytes", "dev-secret"],
)
def test_secret_is_not_safe(secret: str | None) -> None:
    settings = Settings(jwt_secret=secret)

    assert settings.secret_is_safe() is False


def test_random_secret_is_safe_and_used_for_signing(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = secrets.token_urlsafe(36)
    assert len(secret) == 48
    monkeypatch.setenv("BOSUN_JWT_SECRET", secret)

    settings = load_settings()

    assert settings.secret_is_safe() is True
    assert settings.effective_secret() == secret
    assert secret not in repr(settings)


def test_secret_of_exactly_32_bytes_is_safe() -> None:
    assert Settings(jwt_secret="k" * 32).secret_is_safe() is True


def test_effective_secret_falls_back_to_the_dev_secret() -> None:
    settings = load_settings()

    assert settings.effective_secret() == DEV_JWT_SECRET
    assert settings.secret_is_safe() is False


def test_log_level_and_format_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOSUN_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("BOSUN_LOG_FORMAT", "JSON")
    settings = load_settings()
    assert (settings.log_level, settings.log_format) == ("debug", "json")


def test_webhook_limits_reach_the_delivery_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOSUN_WEBHOOKS__MAX_PER_ORG", "5")
    monkeypatch.setenv("BOSUN_WEBHOOKS__BREAKER_COOLDOWN_S", "60")
    settings = Settings(webhooks={"connect_timeout_s": 1.5, "max_in_flight_per_org": 2})  # type: ignore[arg-type]

    config = stream_config(settings)

    assert config.webhook_max_per_org == 5
    assert config.webhook_limits == DeliveryLimits(
        connect_timeout_s=1.5,
        max_in_flight=32,
        max_in_flight_per_org=2,
        breaker=Breaker(failures=5, cooldown_s=60.0),
    )
    with pytest.raises(ValidationError):
        Settings(webhooks={"max_in_flight": 500})  # type: ignore[arg-type]  # past the pool


def test_stdio_mcp_servers_are_off_unless_programs_are_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    default = Settings().mcp
    monkeypatch.setenv("BOSUN_MCP__STDIO_COMMANDS", '["/opt/mcp/tickets", "uvx"]')
    listed = Settings().mcp
    monkeypatch.setenv("BOSUN_MCP__STDIO_COMMANDS", "[]")
    monkeypatch.setenv("BOSUN_MCP__ALLOW_STDIO", "false")  # the old switch, off: still fine
    old_off = Settings().mcp
    monkeypatch.setenv("BOSUN_MCP__ALLOW_STDIO", "true")  # no longer allows anything

    assert (default.stdio_commands, default.stdio_warning()) == ([], None)
    assert default.max_tools_per_toolset == 500
    assert listed.stdio_commands == ["/opt/mcp/tickets", "uvx"]
    assert "/opt/mcp/tickets, uvx" in (listed.stdio_warning() or "")
    assert old_off.stdio_commands == []
    with pytest.raises(ValidationError, match=r"replaced by mcp\.stdio_commands"):
        Settings()


def test_toolsets_default_to_none_and_demo_is_a_deprecated_alias(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BOSUN_TOOLSETS", '["acme_notes:toolset", "demo"]')
    from_env = Settings()
    monkeypatch.delenv("BOSUN_TOOLSETS")

    assert Settings().toolset_names() == []  # no toolset configured: no tools at all
    assert from_env.toolset_names() == ["acme_notes:toolset", "demo"]
    assert Settings(demo=True).toolset_names() == ["demo"]
    assert Settings(demo=True, toolsets=["x:y", "demo"]).toolset_names() == ["x:y", "demo"]


def test_cache_ttls_default_to_an_hour_on_stable_marks_and_five_minutes_on_the_tail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bosun.wiring import provider_config

    config = provider_config(load_settings())
    assert (config.cache_ttl, config.tail_cache_ttl) == ("1h", "5m")
    monkeypatch.setenv("BOSUN_PROVIDERS__TAIL_CACHE_TTL", "1h")
    assert provider_config(load_settings()).tail_cache_ttl == "1h"
    monkeypatch.setenv("BOSUN_PROVIDERS__CACHE_TTL", "5m")
    with pytest.raises(ValidationError, match="tail_cache_ttl '1h' needs"):
        load_settings()
