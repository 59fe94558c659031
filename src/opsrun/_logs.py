"""Run ids on log records: the run and the operation the code running now belongs to.

The run sets them in a context variable (every task and worker thread it starts
inherits it); :class:`RunLogFilter` copies them onto the records a handler sees, and
:class:`RunLogger` onto the records of opsrun's own modules.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar, Token
from typing import TypeAlias

__all__ = [
    "NO_ID",
    "RunLogFilter",
    "RunLogger",
    "enter_operation",
    "enter_run",
    "leave",
    "log_context",
    "run_logger",
]

NO_ID = "-"
"""What a log record carries for an id it has none of (outside a run or an operation)."""

_Scope: TypeAlias = tuple[str, str]
"""Run id and operation id: a plain tuple, as one is made per executed operation."""

_OUTSIDE: _Scope = (NO_ID, NO_ID)
_scope: ContextVar[_Scope] = ContextVar("opsrun_log_scope", default=_OUTSIDE)


def enter_run(run_id: str) -> Token[_Scope]:
    """Mark the current context as running ``run_id``; undo with :func:`leave`."""
    return _scope.set((run_id, NO_ID))


def enter_operation(run_id: str, operation_id: str) -> None:
    """Mark the current task as executing ``operation_id`` of run ``run_id``.

    Meant for a task of its own per operation (the scheduler's): its context is a copy,
    so the mark ends with the task and needs no undoing.
    """
    _scope.set((run_id, operation_id))


def leave(token: Token[_Scope]) -> None:
    """Undo :func:`enter_run` (in the same context)."""
    _scope.reset(token)


def log_context() -> dict[str, str]:
    """Return the ``run_id`` and ``operation_id`` of the code running now.

    Both are ``"-"`` outside a run (``operation_id`` also outside an operation). Useful
    to bind them in a structured logger; with stdlib ``logging``, use
    :class:`RunLogFilter`.
    """
    run_id, operation_id = _scope.get()
    return {"run_id": run_id, "operation_id": operation_id}


class RunLogFilter(logging.Filter):
    """Add ``run_id`` and ``operation_id`` to every log record; it never drops one.

    Attach it to a handler, then use the fields in its format::

        handler = logging.StreamHandler()
        handler.addFilter(RunLogFilter())
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s run=%(run_id)s op=%(operation_id)s %(message)s"))

    Every record the handler formats gets them: opsrun's (loggers under ``opsrun.``)
    and the ones operations and the host log while a run executes. The values come from
    the context the record was logged in: ``"-"`` outside a run or an operation. A
    value the record already has (``extra={"run_id": ...}``) is kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the fields; always True."""
        run_id, operation_id = _scope.get()
        fields = record.__dict__
        fields.setdefault("run_id", run_id)
        fields.setdefault("operation_id", operation_id)
        return True


class RunLogger:
    """A stdlib logger whose records carry ``run_id`` and ``operation_id`` even without
    :class:`RunLogFilter` (what opsrun's own modules log through)."""

    __slots__ = ("logger",)

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)

    def debug(self, msg: str, *args: object) -> None:
        """Log ``msg % args`` at ``DEBUG`` with the ids of the code running now."""
        # Checked first: a disabled level costs one lookup, no dict of ids.
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.log(logging.DEBUG, msg, *args, extra=log_context(), stacklevel=2)

    def warning(self, msg: str, *args: object) -> None:
        """Log at ``WARNING``."""
        if self.logger.isEnabledFor(logging.WARNING):
            self.logger.log(logging.WARNING, msg, *args, extra=log_context(), stacklevel=2)

    def exception(self, msg: str, *args: object) -> None:
        """Log at ``ERROR`` with the exception being handled."""
        if self.logger.isEnabledFor(logging.ERROR):
            self.logger.log(
                logging.ERROR, msg, *args, exc_info=True, extra=log_context(), stacklevel=2
            )


def run_logger(name: str) -> RunLogger:
    """The logger ``name`` whose records carry ``run_id`` and ``operation_id``."""
    return RunLogger(name)
