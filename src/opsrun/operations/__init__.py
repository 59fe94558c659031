"""The operation API: what operation kinds implement and what the engine runs.

Subclass :class:`Operation` (or :class:`SyncOperation` for blocking work), or register an
async function, and add it to an :class:`OperationCatalog`. While it executes, an
operation reads its :class:`OperationContext` and returns an
:class:`~opsrun.model.OperationResult`.
"""

from __future__ import annotations

from ._catalog import OperationCatalog as OperationCatalog
from ._context import AbortSignal as AbortSignal
from ._context import OperationContext as OperationContext
from ._context import RunMeta as RunMeta
from ._operation import FunctionOperation as FunctionOperation
from ._operation import KindFactory as KindFactory
from ._operation import Operation as Operation
from ._operation import OperationFn as OperationFn
from ._operation import SyncOperation as SyncOperation

__all__ = [
    "AbortSignal",
    "FunctionOperation",
    "KindFactory",
    "Operation",
    "OperationCatalog",
    "OperationContext",
    "OperationFn",
    "RunMeta",
    "SyncOperation",
]
