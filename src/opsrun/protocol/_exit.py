"""Exit codes of the ``opsrun`` command, shared by every sub-command."""

from __future__ import annotations

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE"]

#: The command did what was asked: the plan is valid, applied, undone or recovered.
EXIT_OK = 0
#: The plan does not parse, is invalid, or could not be applied (and was rolled back);
#: or undo / recover could not run.
EXIT_FAILED = 1
#: Bad arguments or an unreadable input file.
EXIT_USAGE = 2
#: Ctrl-C (SIGINT, 128 + 2) outside a transaction; a signal N that stops an apply, undo
#: or recover gives 128 + N once the tree is rolled back or the command has finished.
EXIT_INTERRUPTED = 130
