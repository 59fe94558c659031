"""opsrun: operations around a chat turn's main LLM call, and safe LLM edit plans.

The common path is importable from here::

    from opsrun import InMemoryStores, OperationCatalog, OperationContext, Runner, RunRequest

Everything else lives in subpackages named after what they hold: ``opsrun.model`` (the
data types), ``opsrun.operations`` (the operation API), ``opsrun.kinds`` (the built-in
``llm`` and ``template`` kinds), ``opsrun.prompt`` (history window, artifact inclusions,
snapshot), ``opsrun.report`` (the "why this answer" report, SSE), ``opsrun.runner`` (the
engine and executors), ``opsrun.stores``, ``opsrun.providers``, ``opsrun.ports`` (the
interfaces a host implements), ``opsrun.protocol`` (LLM edit plans), ``opsrun.errors``
and ``opsrun.testing`` (doubles and pytest fixtures).
"""

from __future__ import annotations

import logging as _logging
from importlib.metadata import version as _version

from .errors import ConfigError as ConfigError
from .errors import OperationFailed as OperationFailed
from .errors import OpsrunError as OpsrunError
from .errors import ProfileInvalid as ProfileInvalid
from .kinds import builtin_kinds as builtin_kinds
from .model import AppendAfterLastUser as AppendAfterLastUser
from .model import Hook as Hook
from .model import InsertAtDepth as InsertAtDepth
from .model import OperationConfig as OperationConfig
from .model import OperationDefinition as OperationDefinition
from .model import OperationProfile as OperationProfile
from .model import OperationResult as OperationResult
from .model import ProfileOperation as ProfileOperation
from .model import RunRequest as RunRequest
from .model import RunResult as RunResult
from .model import SystemUpdate as SystemUpdate
from .operations import AbortSignal as AbortSignal
from .operations import Operation as Operation
from .operations import OperationCatalog as OperationCatalog
from .operations import OperationContext as OperationContext
from .operations import SyncOperation as SyncOperation
from .redaction import Redactor as Redactor
from .runner import Runner as Runner
from .stores import InMemoryStores as InMemoryStores

__version__: str = _version("opsrun")

# A library logs; the application decides where records go. Without this handler,
# Python's last-resort handler would print opsrun's warnings to stderr.
_logging.getLogger("opsrun").addHandler(_logging.NullHandler())
"""The installed version."""

__all__ = [
    "AbortSignal",
    "AppendAfterLastUser",
    "ConfigError",
    "Hook",
    "InMemoryStores",
    "InsertAtDepth",
    "Operation",
    "OperationCatalog",
    "OperationConfig",
    "OperationContext",
    "OperationDefinition",
    "OperationFailed",
    "OperationProfile",
    "OperationResult",
    "OpsrunError",
    "ProfileInvalid",
    "ProfileOperation",
    "Redactor",
    "RunRequest",
    "RunResult",
    "Runner",
    "SyncOperation",
    "SystemUpdate",
    "builtin_kinds",
]
