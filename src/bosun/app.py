"""The app factory: turn settings into a store, models and the Litestar app."""

from __future__ import annotations

from litestar import Litestar
from pydantic import SecretStr

from bosun import __version__
from bosun.settings import Settings
from providers import Model, ProviderConfig, model_from_spec
from store import Store
from stream import StreamConfig, TokenConfig, TurnModels, create_app


def provider_config(settings: Settings) -> ProviderConfig:
    p = settings.providers

    def secret(value: SecretStr | None) -> str | None:
        return value.get_secret_value() if value else None

    return ProviderConfig(
        anthropic_api_key=secret(p.anthropic_api_key),
        anthropic_base_url=p.anthropic_base_url,
        openai_api_key=secret(p.openai_api_key),
        openai_base_url=p.openai_base_url,
        openai_compatible_api_key=secret(p.openai_compatible_api_key),
        max_retries=p.max_retries,
        timeout_s=p.timeout_s,
        cache_ttl=p.cache_ttl,
    )


def build_models(settings: Settings) -> TurnModels:
    """Build every configured model once; a bad spec fails here, at start-up.

    ``build`` makes further instances with an org's own key (bring your own key).
    """
    executor_spec = settings.models.for_role("executor")
    config = provider_config(settings)
    built: dict[str, Model] = {}
    for spec in {executor_spec, *settings.models.allowed} - {None}:
        assert spec is not None
        built[spec] = model_from_spec(spec, config)
    return TurnModels(
        executor=built[executor_spec] if executor_spec else None,
        executor_spec=executor_spec,
        selectable={spec: built[spec] for spec in settings.models.allowed},
        build=lambda spec, api_key: model_from_spec(spec, config, api_key=api_key),
    )


def stream_config(settings: Settings) -> StreamConfig:
    limits = settings.limits
    return StreamConfig(
        tokens=TokenConfig(secret=settings.effective_secret(), algorithm=settings.jwt_algorithm),
        max_body_bytes=limits.max_body_bytes,
        max_message_chars=limits.max_message_chars,
        keepalive_s=limits.keepalive_s,
        turn_timeout_s=limits.turn_timeout_s,
        sessions_page_size=limits.sessions_page_size,
    )


def build_app(settings: Settings, *, models: TurnModels | None = None) -> Litestar:
    """The whole service for ``settings``; ``models`` overrides the configured ones (tests)."""
    secrets_key = settings.secrets_key.get_secret_value() if settings.secrets_key else None
    return create_app(
        store=Store(settings.database_url, secrets_key=secrets_key),
        models=models if models is not None else build_models(settings),
        config=stream_config(settings),
        version=__version__,
    )
