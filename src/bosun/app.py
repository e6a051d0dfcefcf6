"""The app factory: turn settings into a store, models and the Litestar app."""

from __future__ import annotations

from litestar import Litestar

from bosun import __version__
from bosun.settings import Settings
from providers import Model, model_from_spec
from store import Store
from stream import StreamConfig, TokenConfig, TurnModels, create_app


def build_models(settings: Settings) -> TurnModels:
    """Build every configured model once; a bad spec fails here, at start-up."""
    executor_spec = settings.models.for_role("executor")
    built: dict[str, Model] = {}
    for spec in {executor_spec, *settings.models.allowed} - {None}:
        assert spec is not None
        built[spec] = model_from_spec(spec)
    return TurnModels(
        executor=built[executor_spec] if executor_spec else None,
        selectable={spec: built[spec] for spec in settings.models.allowed},
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
    return create_app(
        store=Store(settings.database_url),
        models=models if models is not None else build_models(settings),
        config=stream_config(settings),
        version=__version__,
    )
