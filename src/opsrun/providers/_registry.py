"""Providers by ``providerRef``: the registry a host fills and injects."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..errors import ConfigError
from ..ports import LlmProvider

__all__ = ["ProviderRegistry"]


class ProviderRegistry:
    """LLM providers keyed by ``providerRef`` (a :class:`~opsrun.ports.ProviderLookup`).

    ``ProviderRegistry({"openai": adapter})`` or ``registry.register("openai", adapter)``.
    A reference is an opaque name chosen by the host; it holds no secret.
    """

    def __init__(self, providers: Mapping[str, LlmProvider] | None = None) -> None:
        self._providers: dict[str, LlmProvider] = {}
        for ref, provider in (providers or {}).items():
            self.register(ref, provider)

    def register(self, provider_ref: str, provider: LlmProvider, *, replace: bool = False) -> None:
        """Register ``provider`` under ``provider_ref``.

        Raises:
            ConfigError: the reference is empty, or taken and ``replace`` is False.
        """
        if not provider_ref:
            raise ConfigError("providerRef must not be empty")
        if provider_ref in self._providers and not replace:
            raise ConfigError(f"provider {provider_ref!r} is already registered")
        self._providers[provider_ref] = provider

    def get(self, provider_ref: str) -> LlmProvider:
        """Return the provider registered as ``provider_ref``.

        Raises:
            ConfigError: no provider has that reference (code ``config_error``).
        """
        try:
            return self._providers[provider_ref]
        except KeyError:
            known = ", ".join(sorted(self._providers)) or "none"
            raise ConfigError(
                f"no LLM provider registered as providerRef {provider_ref!r} (known: {known})",
                details={"providerRef": provider_ref},
            ) from None

    def __contains__(self, provider_ref: object) -> bool:
        return provider_ref in self._providers

    def __iter__(self) -> Iterator[str]:
        return iter(self._providers)

    def __len__(self) -> int:
        return len(self._providers)

    def __repr__(self) -> str:
        return f"ProviderRegistry({sorted(self._providers)!r})"
