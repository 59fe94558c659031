"""Secret masking for everything a run records.

A :class:`Redactor` masks API keys, bearer tokens, cloud keys, private key blocks and
``password=``-style assignments; ``Runner(redactor=...)`` configures it once for the
whole run (operations receive it as ``ctx.redactor``). :class:`StreamRedactor` masks a
streamed text whose secrets may be split across deltas.
"""

from __future__ import annotations

from ._redact import DEFAULT_REDACTOR as DEFAULT_REDACTOR
from ._redact import MASK as MASK
from ._redact import Redactor as Redactor
from ._redact import StreamRedactor as StreamRedactor
from ._redact import redact_text as redact_text
from ._redact import redact_value as redact_value

__all__ = [
    "DEFAULT_REDACTOR",
    "MASK",
    "Redactor",
    "StreamRedactor",
    "redact_text",
    "redact_value",
]
