"""A main LLM for benchmarks: answers at once and keeps no request log.

``opsrun.testing.ScriptedMainLlm`` records every request for asserts; over thousands of
runs that log grows the heap and bills the garbage collector, which a benchmark would
then measure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from opsrun.ports import MainLlmDone, MainLlmRequest, ProviderCapabilities


class QuietMainLlm:
    """Streams ``reply`` in one piece, then its ``MainLlmDone``."""

    capabilities = ProviderCapabilities()

    def __init__(self, reply: str = "OK") -> None:
        self.reply = reply

    async def _reply(self) -> AsyncIterator[str | MainLlmDone]:
        yield self.reply
        yield MainLlmDone(text=self.reply)

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        return self._reply()
