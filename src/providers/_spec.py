"""Choosing a model by a spec string: ``PROVIDER:MODEL``.

``scripted:PATH``, ``anthropic:MODEL``, ``openai:MODEL`` and
``openai-compatible:MODEL@URL`` (any server speaking OpenAI's chat completions API).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from providers._config import ProviderConfig
from providers._model import Model, ModelSpecError
from providers._testing import ScriptedModel

PROVIDERS = ("scripted", "anthropic", "openai", "openai-compatible")
# OpenAI-compatible servers rarely check keys, but the SDK insists on one.
UNUSED_KEY = "unused"


def provider_of(spec: str) -> str:
    """The provider part of a spec (``anthropic`` for ``anthropic:claude-haiku-4-5``)."""
    return spec.partition(":")[0]


def model_from_spec(
    spec: str, config: ProviderConfig | None = None, *, api_key: str | None = None
) -> Model:
    """Build the model a spec names; ``api_key`` overrides the configured one (per-org keys).

    Raises ``ModelSpecError`` saying what to write instead when the spec is unusable.
    """
    config = config or ProviderConfig()
    provider, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ModelSpecError(
            f"Model spec {spec!r} has no provider prefix: write PROVIDER:MODEL, "
            f"with PROVIDER one of {', '.join(PROVIDERS)} (for example anthropic:claude-haiku-4-5)"
        )
    if provider == "scripted":
        return _scripted(rest)
    if provider == "anthropic":
        from providers._anthropic import AnthropicModel

        key = api_key or config.anthropic_api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ModelSpecError(
                f"{spec!r} needs an Anthropic API key: set ANTHROPIC_API_KEY or "
                "BOSUN_PROVIDERS__ANTHROPIC_API_KEY"
            )
        return AnthropicModel(rest, config=config, api_key=key)
    if provider == "openai":
        from providers._openai import OpenAIModel

        key = api_key or config.openai_api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            raise ModelSpecError(
                f"{spec!r} needs an OpenAI API key: set OPENAI_API_KEY or "
                "BOSUN_PROVIDERS__OPENAI_API_KEY"
            )
        return OpenAIModel(rest, config=config, api_key=key)
    if provider == "openai-compatible":
        return _openai_compatible(spec, rest, config, api_key)
    raise ModelSpecError(
        f"Unknown model provider {provider!r} in {spec!r}; use one of {', '.join(PROVIDERS)}"
    )


def _scripted(path_text: str) -> Model:
    path = Path(path_text)
    if not path.is_file():
        raise ModelSpecError(f"Scripted model file {path_text!r} does not exist")
    try:
        return ScriptedModel.from_file(path)
    except (ValueError, yaml.YAMLError) as exc:  # pydantic's ValidationError is a ValueError
        raise ModelSpecError(
            f"Scripted model file {path_text!r} is not a valid script: {exc}"
        ) from exc


def _openai_compatible(spec: str, rest: str, config: ProviderConfig, api_key: str | None) -> Model:
    from providers._openai import OpenAIModel

    model, at, url = rest.rpartition("@")
    if not at or not model or not url.startswith(("http://", "https://")):
        raise ModelSpecError(
            f"{spec!r} needs a base URL: write openai-compatible:MODEL@URL, for example "
            "openai-compatible:llama3.1@http://127.0.0.1:11434/v1"
        )
    key = api_key or config.openai_compatible_api_key or UNUSED_KEY
    return OpenAIModel(
        model, config=config, base_url=url, api_key=key, provider="openai-compatible"
    )
