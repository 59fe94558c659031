"""Aux LLM provider doubles for ``kind="llm"``: scripted, computed, recording; credentials.

In the spirit of pydantic-ai's ``TestModel`` / ``FunctionModel``: no network, every
request kept for asserts, and replies that are either queued or computed.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import anyio

from ..errors import ConfigError
from ..model import Usage
from ..ports import LlmProvider, LlmRequest, LlmResponse, ProviderCapabilities
from ._closable import Closable

__all__ = [
    "Delayed",
    "Exchange",
    "FunctionProvider",
    "ProviderReply",
    "RecordingProvider",
    "ScriptedProvider",
    "StaticCredentials",
]


@dataclass(frozen=True, slots=True)
class Delayed:
    """A scripted reply that arrives after ``seconds`` (to exercise ``timeoutMs``)."""

    seconds: float
    """How long the provider takes."""
    reply: str | LlmResponse | BaseException | Delayed
    """What it then answers (or raises)."""


ProviderReply: TypeAlias = str | LlmResponse | BaseException | Delayed
"""One scripted reply: text, a full response, an exception to raise, or a delayed one."""


def _estimate(text: str) -> int:
    return (len(text) + 3) // 4


def _to_response(reply: str | LlmResponse, request: LlmRequest, request_id: str) -> LlmResponse:
    if isinstance(reply, LlmResponse):
        return reply
    prompt_tokens = sum(_estimate(m.content) for m in request.messages)
    output_tokens = _estimate(reply)
    return LlmResponse(
        text=reply,
        usage=Usage(
            input_tokens=prompt_tokens,
            output_tokens=output_tokens,
            total_tokens=prompt_tokens + output_tokens,
        ),
        model=request.model,
        request_id=request_id,
    )


class _Recorder(Closable):
    def __init__(self, capabilities: ProviderCapabilities | None) -> None:
        self._capabilities = capabilities or ProviderCapabilities()
        self.requests: list[LlmRequest] = []

    @property
    def capabilities(self) -> ProviderCapabilities:
        """What the double claims to accept (settable in the constructor)."""
        return self._capabilities

    @property
    def last_request(self) -> LlmRequest | None:
        """The most recent request, or None before the first call."""
        return self.requests[-1] if self.requests else None

    @property
    def calls(self) -> int:
        """How many times ``complete`` was called."""
        return len(self.requests)

    async def _deliver(self, reply: Any, request: LlmRequest, number: int) -> LlmResponse:
        """``reply`` to call ``number`` (its request id ``test-<number>``, taken when the
        call came in, so calls that overlap keep theirs)."""
        while isinstance(reply, Delayed):
            await anyio.sleep(reply.seconds)
            reply = reply.reply
        if isinstance(reply, BaseException):
            raise reply
        if not isinstance(reply, str | LlmResponse):
            raise TypeError(f"a provider reply must be str or LlmResponse, not {type(reply)}")
        return _to_response(reply, request, f"test-{number}")


class ScriptedProvider(_Recorder):
    """Answers from a queue of :data:`ProviderReply` items and records every request.

    Strings become an :class:`~opsrun.ports.LlmResponse` with finish reason ``stop``,
    estimated token usage (characters / 4, no cost) and request id ``test-<n>``.
    When the queue is empty it answers ``default``, or fails the call with
    ``AssertionError`` when ``default`` is None so a test notices an unexpected call.

    Example::

        provider = ScriptedProvider(["first", RateLimited("slow down", retry_after=0.01)])
        provider.push(Delayed(5, "too late"))
    """

    def __init__(
        self,
        replies: Iterable[ProviderReply] = (),
        *,
        default: str | LlmResponse | None = "OK",
        capabilities: ProviderCapabilities | None = None,
    ) -> None:
        super().__init__(capabilities)
        self.replies: deque[ProviderReply] = deque(_listed(replies))
        self.default = default
        self.unexpected: list[LlmRequest] = []
        """The requests that found the queue empty with ``default`` None (the runner
        records the ``AssertionError`` they raised as the call's error: assert on this)."""

    def push(self, *replies: ProviderReply) -> None:
        """Queue more replies."""
        self.replies.extend(replies)

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Record the request and deliver the next reply.

        Raises:
            ProviderError: the double was closed (``provider_closed``).
        """
        self._check_open()
        self.requests.append(request)
        number = len(self.requests)
        if self.replies:
            return await self._deliver(self.replies.popleft(), request, number)
        if self.default is None:
            self.unexpected.append(request)
            raise AssertionError("unexpected aux LLM call: the ScriptedProvider queue is empty")
        return await self._deliver(self.default, request, number)


ProviderFn: TypeAlias = Callable[
    [LlmRequest], "str | LlmResponse | Delayed | Awaitable[str | LlmResponse | Delayed]"
]
"""What :class:`FunctionProvider` calls: request in, reply out (sync or async)."""


class FunctionProvider(_Recorder):
    """Computes each reply with ``fn(request)``, sync or async; exceptions propagate.

    Example::

        def notes(request: LlmRequest) -> str:
            return "- " + request.messages[-1].content[:40]

        provider = FunctionProvider(notes)
    """

    def __init__(self, fn: ProviderFn, *, capabilities: ProviderCapabilities | None = None) -> None:
        super().__init__(capabilities)
        self.fn = fn

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Record the request and return the computed reply.

        Raises:
            ProviderError: the double was closed (``provider_closed``).
        """
        self._check_open()
        self.requests.append(request)
        number = len(self.requests)
        reply: Any = self.fn(request)
        if inspect.isawaitable(reply):
            reply = await reply
        return await self._deliver(reply, request, number)


@dataclass(frozen=True, slots=True)
class Exchange:
    """One call seen by a :class:`RecordingProvider`."""

    request: LlmRequest
    """What was asked."""
    response: LlmResponse | None
    """What came back, or None when the call raised."""
    error: BaseException | None
    """What it raised, or None."""


class RecordingProvider(Closable):
    """Wraps any provider and keeps every request with its response or error.

    Closing it (``aclose()`` or ``async with``) closes only the wrapper: ``inner``
    stays open, like a client given to a real adapter.
    """

    def __init__(self, inner: LlmProvider) -> None:
        self.inner = inner
        self.exchanges: list[Exchange] = []

    @property
    def capabilities(self) -> ProviderCapabilities:
        """The wrapped provider's capabilities."""
        return self.inner.capabilities

    @property
    def requests(self) -> list[LlmRequest]:
        """Every request, in call order."""
        return [e.request for e in self.exchanges]

    @property
    def responses(self) -> list[LlmResponse]:
        """Every successful response, in call order."""
        return [e.response for e in self.exchanges if e.response is not None]

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Forward the call and record what happened (cancellation is not recorded).

        Raises:
            ProviderError: the wrapper was closed (``provider_closed``, not recorded).
        """
        self._check_open()
        try:
            response = await self.inner.complete(request)
        except Exception as exc:
            self.exchanges.append(Exchange(request, None, exc))
            raise
        self.exchanges.append(Exchange(request, response, None))
        return response


class StaticCredentials:
    """A ``CredentialResolver`` over a fixed mapping ``{credentialRef: secret}``."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        self.secrets = dict(secrets or {})
        self.resolved: list[str] = []
        """References resolved so far, in order (never the secrets)."""

    async def resolve(self, credential_ref: str) -> str:
        """Return the secret.

        Raises:
            ConfigError: the reference is unknown.
        """
        try:
            secret = self.secrets[credential_ref]
        except KeyError:
            raise ConfigError("unknown credentialRef") from None
        self.resolved.append(credential_ref)
        return secret

    def __repr__(self) -> str:
        return f"StaticCredentials(refs={sorted(self.secrets)!r})"


def _listed(replies: Iterable[Any]) -> Iterable[Any]:
    """``replies``, refused when it is a single string (``["hello"]`` was meant).

    Raises:
        TypeError: ``replies`` is a ``str``.
    """
    if isinstance(replies, str):
        raise TypeError(f"replies is a list of replies, not one string: use [{replies!r}]")
    return replies
