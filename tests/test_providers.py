"""opsrun.providers: the registry, the environment credential resolver, the port types."""

from __future__ import annotations

import pytest

import opsrun.providers
from opsrun.errors import ConfigError
from opsrun.ports import (
    CredentialResolver,
    LlmProvider,
    LlmRequest,
    ProviderLookup,
    ProviderMessage,
)
from opsrun.providers import EnvCredentials, ProviderRegistry
from opsrun.testing import FunctionProvider, RecordingProvider, ScriptedProvider, StaticCredentials

# Static conformance: mypy checks these assignments.
_provider: LlmProvider = ScriptedProvider()
_function: LlmProvider = FunctionProvider(lambda request: "x")
_recording: LlmProvider = RecordingProvider(ScriptedProvider())
_lookup: ProviderLookup = ProviderRegistry()
_env: CredentialResolver = EnvCredentials()
_static: CredentialResolver = StaticCredentials()


def test_public_names_are_exported() -> None:
    for name in opsrun.providers.__all__:
        assert hasattr(opsrun.providers, name), name
    assert sorted(opsrun.providers.__all__) == opsrun.providers.__all__


def test_registry_registers_and_finds_providers() -> None:
    first, second = ScriptedProvider(), ScriptedProvider()
    registry = ProviderRegistry({"a": first})
    registry.register("b", second)
    assert registry.get("a") is first
    assert registry.get("b") is second
    assert "a" in registry
    assert "z" not in registry
    assert sorted(registry) == ["a", "b"]
    assert len(registry) == 2
    assert repr(registry) == "ProviderRegistry(['a', 'b'])"


def test_registry_refuses_duplicates_unless_replacing() -> None:
    registry = ProviderRegistry({"a": ScriptedProvider()})
    with pytest.raises(ConfigError):
        registry.register("a", ScriptedProvider())
    replacement = ScriptedProvider()
    registry.register("a", replacement, replace=True)
    assert registry.get("a") is replacement
    with pytest.raises(ConfigError):
        registry.register("", ScriptedProvider())


def test_unknown_provider_is_a_config_error_listing_the_known_ones() -> None:
    registry = ProviderRegistry({"openai": ScriptedProvider()})
    with pytest.raises(ConfigError) as caught:
        registry.get("anthropic")
    assert caught.value.code == "config_error"
    assert "openai" in caught.value.message


@pytest.mark.anyio
async def test_env_credentials_resolve_by_name_or_prefix() -> None:
    environ = {"OPSRUN_CRED_OPENAI_MAIN": "secret-1", "MY_KEY": "secret-2"}
    creds = EnvCredentials({"mine": "MY_KEY"}, prefix="OPSRUN_CRED_", environ=environ)
    assert await creds.resolve("openai-main") == "secret-1"
    assert await creds.resolve("mine") == "secret-2"
    assert creds.variable("a.b") == "OPSRUN_CRED_A_B"


@pytest.mark.anyio
async def test_env_credentials_missing_is_a_config_error_without_values() -> None:
    creds = EnvCredentials(environ={"OTHER": "secret-value"})
    with pytest.raises(ConfigError) as caught:
        await creds.resolve("absent")
    assert "ABSENT" in caught.value.message
    assert "secret-value" not in str(caught.value)


def test_request_repr_hides_the_credential() -> None:
    request = LlmRequest(
        messages=(ProviderMessage(role="user", content="hi"),),
        model="m",
        credential="super-secret-credential",
    )
    assert "super-secret-credential" not in repr(request)
    assert request.credential == "super-secret-credential"
