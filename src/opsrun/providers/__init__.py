"""LLM providers for ``kind="llm"`` operations: the registry and credential resolvers.

The port itself (:class:`~opsrun.ports.LlmProvider`, :class:`~opsrun.ports.LlmRequest`,
:class:`~opsrun.ports.LlmResponse`) lives in :mod:`opsrun.ports`; test doubles live in
:mod:`opsrun.testing` (``ScriptedProvider``, ``FunctionProvider``, ``RecordingProvider``,
``StaticCredentials``).
"""

from __future__ import annotations

from ..ports import CredentialResolver as CredentialResolver
from ..ports import LlmProvider as LlmProvider
from ..ports import LlmRequest as LlmRequest
from ..ports import LlmResponse as LlmResponse
from ..ports import ProviderCapabilities as ProviderCapabilities
from ..ports import ResponseFormat as ResponseFormat
from ._credentials import EnvCredentials as EnvCredentials
from ._registry import ProviderRegistry as ProviderRegistry

__all__ = [
    "CredentialResolver",
    "EnvCredentials",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "ProviderCapabilities",
    "ProviderRegistry",
    "ResponseFormat",
]
