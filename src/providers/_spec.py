"""Choosing a model by a spec string such as ``scripted:replies.yaml``."""

from __future__ import annotations

from pathlib import Path

import yaml

from providers._model import Model, ModelSpecError
from providers._testing import ScriptedModel

PROVIDERS = ("scripted", "anthropic", "openai", "openai-compatible")


def model_from_spec(spec: str) -> Model:
    """Build the model a spec names: ``scripted:PATH``, ``anthropic:MODEL``, ``openai:MODEL``.

    Raises ``ModelSpecError`` with what to write instead when the spec is unusable.
    """
    provider, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ModelSpecError(
            f"Model spec {spec!r} has no provider prefix: write PROVIDER:MODEL, "
            f"with PROVIDER one of {', '.join(PROVIDERS)} (for example scripted:replies.yaml)"
        )
    if provider == "scripted":
        path = Path(rest)
        if not path.is_file():
            raise ModelSpecError(f"Scripted model file {rest!r} does not exist")
        try:
            return ScriptedModel.from_file(path)
        except (ValueError, yaml.YAMLError) as exc:  # pydantic's ValidationError, JSON, YAML
            raise ModelSpecError(
                f"Scripted model file {rest!r} is not a valid script: {exc}"
            ) from exc
    if provider in PROVIDERS:
        raise ModelSpecError(
            f"The {provider!r} provider adapter is not available in this build yet; "
            "use a scripted:PATH model for now"
        )
    raise ModelSpecError(
        f"Unknown model provider {provider!r} in {spec!r}; use one of {', '.join(PROVIDERS)}"
    )
