"""Test doubles for opsrun users: offline main LLMs, a fake clock, sequential ids.

The pytest plugin (``opsrun.testing._plugin``, loaded through the ``pytest11`` entry
point) provides ready-made fixtures such as ``opsrun_runner``.
"""

from __future__ import annotations

from ._fakes import FakeClock as FakeClock
from ._fakes import SequentialIds as SequentialIds
from ._main_llm import FunctionMainLlm as FunctionMainLlm
from ._main_llm import OfflineMainLlm as OfflineMainLlm
from ._main_llm import ScriptedMainLlm as ScriptedMainLlm

__all__ = ["FakeClock", "FunctionMainLlm", "OfflineMainLlm", "ScriptedMainLlm", "SequentialIds"]
