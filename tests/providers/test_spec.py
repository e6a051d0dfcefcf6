"""Model spec strings: what each builds, and the errors that say how to fix a bad one."""

from __future__ import annotations

import pytest

from providers import ModelSpecError, ProviderConfig, model_from_spec


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY"),
        ("openai:gpt-4.1-mini", "OPENAI_API_KEY"),
    ],
)
def test_a_provider_without_a_key_is_a_clear_error(spec: str, variable: str) -> None:
    with pytest.raises(ModelSpecError, match=variable):
        model_from_spec(spec)


@pytest.mark.parametrize(
    "spec",
    [
        "openai-compatible:llama3",
        "openai-compatible:llama3@localhost:11434",
        "openai-compatible:@http://x",
    ],
)
def test_openai_compatible_needs_model_and_url(spec: str) -> None:
    with pytest.raises(ModelSpecError, match=r"openai-compatible:MODEL@URL"):
        model_from_spec(spec)


def test_specs_build_named_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    config = ProviderConfig(openai_api_key="configured")
    assert model_from_spec("anthropic:claude-haiku-4-5").name == "anthropic:claude-haiku-4-5"
    assert model_from_spec("openai:gpt-4.1-mini", config).name == "openai:gpt-4.1-mini"
    local = model_from_spec("openai-compatible:llama3.1@http://127.0.0.1:11434/v1")
    assert local.name == "openai-compatible:llama3.1"
    # An explicit (per-org) key is enough on its own.
    assert model_from_spec("openai:gpt-4o", api_key="org-key").name == "openai:gpt-4o"
