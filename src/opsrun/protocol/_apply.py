"""apply_plan: validate, snapshot, apply atomically, check, and roll back on any failure.

The sequence is: validate (APPLY mode) → lock ``<root>/.opsrun`` and finish any
interrupted transaction → read every touched path (the snapshot) and compute the
new state of each → write the snapshot to the journal → apply in canonical order
with atomic writes → run the optional check → commit. Any failure after the
journal is written rolls the tree back to the snapshot before the error is
raised; a crash at any point is finished by :func:`opsrun.protocol.recover`.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

from opsrun._redact import redact_text
from opsrun.errors import ApplyError, ConfigError, OpsrunError, bound_text

from ._events import PlanEventSink, emit
from ._fs import FileSystem, PathState, Tree
from ._journal import (
    Journal,
    Kind,
    RollbackReport,
    TransactionOutcome,
    after_state,
    begin,
    norm_path,
    open_locked,
    rollback,
)
from ._limits import PathPolicy, PlanLimits
from ._patch_place import PatchTolerance, check_tolerance
from ._plan import ActionKind, Plan
from ._preview import Change, plan_changes, validation_errors, violations_error

__all__ = ["ApplyResult", "CheckCommand", "apply_plan"]

#: A check: an argv list run in the root, or a callable given the root that returns
#: ``False`` or raises to fail.
CheckCommand = Sequence[str] | Callable[[Path], object]

_DELETES = frozenset({ActionKind.DELETE_FILE, ActionKind.DELETE_DIR})
_OUTPUT_TAIL = 4000
_MESSAGE_LINES = 20


class ApplyResult(BaseModel):
    """A committed transaction."""

    model_config = ConfigDict(frozen=True)

    tx_id: str = Field(description="Journal id; undo() reverts this transaction.")
    changed: tuple[str, ...] = Field(description="Paths written, created or deleted, in order.")
    check_returncode: int | None = Field(
        default=None, description="Exit status of an argv check; None when none ran."
    )
    check_output: str = Field(default="", description="Tail of the check's stdout and stderr.")
    recovered: TransactionOutcome | None = Field(
        default=None,
        description="An interrupted transaction this apply finished first, as recover() "
        "would have (what it left in place or could not restore included); None when "
        "there was none.",
    )


def _snapshot(tree: Tree, changes: list[Change]) -> dict[str, PathState]:
    """Old state of every path the changes touch, parents created on the way included.

    Paths are keyed as the tree resolves them (``src/new/`` is ``src/new``), so one
    directory is journalled once.
    """
    states: dict[str, PathState] = {}
    for change in changes:
        path = norm_path(change.action.path)
        if change.after.kind in ("file", "dir"):
            segments = path.split("/")
            for n in range(1, len(segments)):
                parent = "/".join(segments[:n])
                if parent not in states:
                    states[parent] = tree.state(parent, read=False)
        for sub, state in change.removed:
            states.setdefault(norm_path(sub), state)
        states.setdefault(path, change.before)
    touched = _touched(changes)
    return {p: s for p, s in states.items() if not (s.kind == "dir" and p not in touched)}


def _new_kinds(changes: list[Change]) -> dict[str, Kind]:
    """What the apply puts at each path it touches (parents it creates are directories)."""
    kinds: dict[str, Kind] = {}
    for change in changes:
        path = norm_path(change.action.path)
        if change.after.kind in ("file", "dir"):
            segments = path.split("/")
            for n in range(1, len(segments)):
                kinds.setdefault("/".join(segments[:n]), "dir")
        for sub, _ in change.removed:
            kinds[norm_path(sub)] = "none"
        kinds[path] = change.after.kind
    return kinds


def _touched(changes: list[Change]) -> set[str]:
    paths = {norm_path(c.action.path) for c in changes}
    for change in changes:
        paths.update(norm_path(sub) for sub, _ in change.removed)
    return paths


def _execute(tree: Tree, journal: Journal, changes: list[Change]) -> list[str]:
    done: list[str] = []
    for change in changes:
        path, before, after = change.action.path, change.before, change.after
        if change.removed:
            for sub, _ in reversed(change.removed):
                tree.remove(sub)
        elif after.kind == "file":
            tree.write(path, after.data or b"", after.mode, temp=journal.temp_name())
        elif after.kind == "dir":
            if before.kind == "dir":
                continue
            tree.mkdir(path, after.mode)
        elif before.kind == "none":
            continue
        else:
            tree.remove(path)
        done.append(path)
    return done


def _stop_point(stop: threading.Event | None) -> None:
    """Raise ``ERR_APPLY_CANCELLED`` when the apply was asked to stop."""
    if stop is not None and stop.is_set():
        raise ApplyError("the apply was cancelled", code="ERR_APPLY_CANCELLED")


def _run_check(
    check: CheckCommand, root: Path, timeout: float, stop: threading.Event | None = None
) -> tuple[int | None, str]:
    """Run the check; return (returncode, output) or raise ApplyError.

    An argv check runs in its own process group (POSIX; its own process group on
    Windows), killed whole when it times out or ``stop`` is set.

    Raises:
        ApplyError: ``ERR_CHECK_FAILED`` (failed, timed out, could not start) or
            ``ERR_APPLY_CANCELLED`` (``stop`` was set while it ran).
    """
    if callable(check):
        try:
            ok = check(root)
        except Exception as exc:
            raise ApplyError(
                f"the check raised {exc!r}", code="ERR_CHECK_FAILED", details={"error": repr(exc)}
            ) from exc
        if ok is False:
            raise ApplyError("the check returned False", code="ERR_CHECK_FAILED")
        return None, ""
    argv = shlex.split(check) if isinstance(check, str) else list(check)
    with tempfile.TemporaryFile() as sink:  # a file: no pipe to fill, none a child holds open
        try:
            process = subprocess.Popen(
                argv,
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                **_OWN_GROUP,
            )
        except OSError as exc:
            raise ApplyError(
                f"the check `{_command(argv)}` could not start: {exc.strerror or exc}",
                code="ERR_CHECK_FAILED",
                details={"argv": _masked(argv), "error": redact_text(str(exc))},
            ) from exc
        try:
            ended = _wait(process, timeout, stop)
        finally:
            if process.returncode is None:  # timed out, stopped, or interrupted
                _kill_group(process)
        output = _tail(_read_tail(sink))
    if not ended:
        _stop_point(stop)
        raise ApplyError(
            f"the check `{_command(argv)}` timed out after {timeout:g}s{_shown(output)}",
            code="ERR_CHECK_FAILED",
            details={"argv": _masked(argv), "timed_out": True, "output": output},
        )
    if process.returncode != 0:
        raise ApplyError(
            f"the check `{_command(argv)}` exited with status {process.returncode}{_shown(output)}",
            code="ERR_CHECK_FAILED",
            details={"argv": _masked(argv), "returncode": process.returncode, "output": output},
        )
    return process.returncode, output


# POSIX: a new session (so a new process group); Windows: a new process group.
_OWN_GROUP: dict[str, Any] = (
    {"start_new_session": True}
    if os.name == "posix"
    else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
)
_POLL = 0.05


def _wait(process: subprocess.Popen[bytes], timeout: float, stop: threading.Event | None) -> bool:
    """Wait for ``process`` to end; False when ``timeout`` passed or ``stop`` was set first."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (stop is not None and stop.is_set()):
            return False
        try:
            process.wait(timeout=remaining if stop is None else min(remaining, _POLL))
        except subprocess.TimeoutExpired:
            continue
        return True


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the check and, on POSIX, every process of its group; then reap it."""
    if os.name == "posix":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        process.kill()
    process.wait()


def _read_tail(file: IO[bytes]) -> bytes:
    """The last bytes of the check's output file (enough for :data:`_OUTPUT_TAIL` characters)."""
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - 4 * _OUTPUT_TAIL))
    return file.read()


def _command(argv: Sequence[str]) -> str:
    """The check as a shell line, secrets masked."""
    return redact_text(shlex.join(argv))


def _masked(argv: Sequence[str]) -> list[str]:
    """The check's argv for an error's details, secrets masked as in its message.

    The whole line is masked first, so a secret split over two words (``Bearer``,
    then the token) is caught as in the message; a word left intact keeps its mask.
    """
    line = _command(argv)
    try:
        words = shlex.split(line)
    except ValueError:
        words = []
    if len(words) == len(argv):
        return [redact_text(w) for w in words]
    return [redact_text(a) for a in argv]


def _tail(raw: bytes) -> str:
    """The last part of a check's output (stdout and stderr), secrets masked."""
    return redact_text(raw.decode("utf-8", "replace")[-_OUTPUT_TAIL:])


def _shown(output: str) -> str:
    """The output's last lines, for the error message ("" when there was none)."""
    lines = output.rstrip("\n").splitlines()[-_MESSAGE_LINES:]
    return ("; its output ends:\n" + "\n".join(lines)) if lines else ""


def _as_apply_error(exc: BaseException) -> ApplyError:
    if isinstance(exc, ApplyError):
        return exc
    if isinstance(exc, OpsrunError):
        return ApplyError(exc.message, code=exc.code, details=exc.details)
    if isinstance(exc, OSError):
        return ApplyError(
            f"file system error: {exc.strerror or exc}",
            code="ERR_IO",
            details={"errno": exc.errno, "error": str(exc)},
        )
    return ApplyError(f"unexpected error: {exc!r}", code="ERR_APPLY_FAILED")


def _with_report(error: ApplyError, report: RollbackReport) -> ApplyError:
    """``error``, saying which paths the rollback left alone because they hold what the
    apply did not write (``details["kept"]``, ``details["not_restored"]``,
    ``details["saved_to"]``)."""
    notes: list[str] = []
    details: dict[str, object] = {}
    if report.kept:
        notes.append(
            f"{_count(report.kept, 'created path')} left in place because something the "
            f"apply did not write is there: {_listed(report.kept)}"
        )
        details["kept"] = list(report.kept)
    if report.not_restored:
        notes.append(
            f"{_count(report.not_restored, 'path')} not restored because something the apply "
            f"did not write is there now, left untouched: {_listed(report.not_restored)}; "
            f"the old content is saved in {report.saved_to!r} under the root"
        )
        details["not_restored"] = list(report.not_restored)
        details["saved_to"] = report.saved_to
    if not notes:
        return error
    return ApplyError(
        f"{error.message}\n(rolled back, but {'; '.join(notes)})",
        code=error.code,
        details={**error.details, **details},
    )


def _count(paths: list[str], noun: str) -> str:
    """``1 path was`` / ``2 paths were``."""
    return f"1 {noun} was" if len(paths) == 1 else f"{len(paths)} {noun}s were"


def _listed(paths: list[str]) -> str:
    """The first three paths, quoted."""
    return ", ".join(repr(p) for p in paths[:3]) + (", …" if len(paths) > 3 else "")


def _check_timeout(value: float) -> None:
    """Refuse a check time limit that is not a positive number of seconds (``inf``: none).

    Raises:
        ConfigError: ``value`` is not a number, is NaN, zero or negative.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        ok = False
    else:
        ok = not math.isnan(value) and value > 0
    if not ok:
        raise ConfigError(
            f"check_timeout must be a positive number of seconds, not {value!r}",
            details={"field": "check_timeout"},
        )


def apply_plan(
    plan: Plan,
    root: str | os.PathLike[str],
    *,
    check: CheckCommand | None = None,
    allow_delete: bool = False,
    check_timeout: float = 600.0,
    read_paths: Collection[str] | None = None,
    limits: PlanLimits | None = None,
    policy: PathPolicy | None = None,
    fs: FileSystem | None = None,
    events: PlanEventSink | None = None,
    tolerance: PatchTolerance = "exact",
    stop: threading.Event | None = None,
) -> ApplyResult:
    """Apply ``plan`` to the directory ``root`` as one transaction.

    Args:
        plan: A parsed plan.
        root: The project directory.
        check: Optional check run after the changes (argv list with ``cwd=root``, or a
            callable given the root); a failure rolls everything back.
        allow_delete: The user's confirmation for DELETE_FILE / DELETE_DIR actions.
        check_timeout: Seconds an argv check may run (positive; ``math.inf``: no limit).
        read_paths: Files read during PLAN (for the UPDATE-without-base rule).
        limits: Validation limits.
        policy: Path policy.
        fs: The file-system door (tests inject faults here).
        events: Where ``APPLY_SUCCESS``, ``APPLY_ROLLBACK`` (the tree was restored) and
            ``APPLY_FAILED`` (refused before writing) go; default: stdlib ``logging``.
        tolerance: How sloppy a PATCH_FILE hunk may be: ``"exact"`` (GNU ``patch -F0``
            placement), ``"whitespace"`` or ``"loose"``; a hunk that does not match at
            its stated line and matches in several places is ``ERR_PATCH_AMBIGUOUS``.
        stop: Set it (from another thread) to cancel the apply before it commits: a
            running argv check is killed with its process group, what was written is
            rolled back, and ``ERR_APPLY_CANCELLED`` is raised. Once committed, it has
            no effect.

    Returns:
        The committed transaction; :func:`opsrun.protocol.undo` reverts it.

    Raises:
        ApplyError: always this class, with the code of what went wrong: the first
            validation violation's code (all in ``details["violations"]``),
            ``ERR_DELETE_NOT_CONFIRMED``, ``ERR_BASE_MISMATCH`` / ``ERR_PATCH_*`` /
            ``ERR_RANGE_INVALID`` / ``ERR_NON_UTF8_FILE`` (nothing written),
            ``ERR_PATH_SYMLINK`` / ``ERR_PATH_ESCAPES_ROOT`` / ``ERR_PATH_PROTECTED``,
            ``ERR_CHECK_FAILED``, ``ERR_APPLY_CANCELLED``, ``ERR_IO``, ``ERR_TX_BUSY``.
            The tree is back to its
            old state, except with ``ERR_ROLLBACK_FAILED``: then call ``recover(root)``.
            The rollback never removes what the apply did not write: a path the apply
            created that meanwhile received other things (the check's ``__pycache__``, a
            link) is left in place, in ``details["kept"]``; a path that existed before
            and now holds such a thing (a directory with files where the plan deleted a
            file) is left as it is and not restored, in ``details["not_restored"]``,
            its old files copied under ``details["saved_to"]``.
        ConfigError: ``tolerance`` is not a level, or ``check_timeout`` is not a
            positive number (NaN, zero or negative).
    """
    check_tolerance(tolerance)
    _check_timeout(check_timeout)
    try:
        result = _apply(
            plan,
            root,
            check,
            allow_delete,
            check_timeout,
            read_paths,
            limits,
            policy,
            fs,
            tolerance,
            stop,
        )
    except _RolledBack as rolled:
        error = rolled.error
        emit(events, "APPLY_ROLLBACK", code=error.code, reason=bound_text(error.message, 200))
        raise error from rolled.__cause__
    except ApplyError as exc:
        emit(events, "APPLY_FAILED", code=exc.code, reason=bound_text(exc.message, 200))
        raise
    emit(
        events,
        "APPLY_SUCCESS",
        tx_id=result.tx_id,
        changed=len(result.changed),
        check_returncode=result.check_returncode,
    )
    return result


class _RolledBack(Exception):
    """An apply failed after writing and the tree was restored: ``error`` says why."""

    def __init__(self, error: ApplyError) -> None:
        super().__init__(error.message)
        self.error = error


def _apply(
    plan: Plan,
    root: str | os.PathLike[str],
    check: CheckCommand | None,
    allow_delete: bool,
    check_timeout: float,
    read_paths: Collection[str] | None,
    limits: PlanLimits | None,
    policy: PathPolicy | None,
    fs: FileSystem | None,
    tolerance: PatchTolerance = "exact",
    stop: threading.Event | None = None,
) -> ApplyResult:
    blocking = validation_errors(plan, root, read_paths, limits, policy)
    if blocking:
        raise violations_error(ApplyError, blocking)
    deletes = [a.path for a in plan.actions if a.kind in _DELETES]
    if deletes and not allow_delete:
        raise ApplyError(
            f"the plan deletes {len(deletes)} path(s) ({deletes[0]!r}…); "
            "deletes need allow_delete=True (the user's confirmation)",
            code="ERR_DELETE_NOT_CONFIRMED",
            details={"paths": deletes},
        )
    try:
        tree = Tree(fs or FileSystem(), root)
    except OSError as exc:
        raise _as_apply_error(exc) from exc
    journal: Journal | None = None
    lock_fd: int | None = None
    try:
        lock_fd, recovered = open_locked(tree)
        changes = plan_changes(tree, plan, tolerance=tolerance)
        states = _snapshot(tree, changes)
        _stop_point(stop)
        journal = begin(tree, states, lock_fd, _new_kinds(changes))
        changed = _execute(tree, journal, changes)
        _stop_point(stop)
        returncode, output = (
            (None, "")
            if check is None
            else (_run_check(check, Path(os.fspath(root)), check_timeout, stop))
        )
        _stop_point(stop)
        journal.commit(after_state(tree, states))
        return ApplyResult(
            tx_id=journal.tx_id,
            changed=tuple(changed),
            check_returncode=returncode,
            check_output=output,
            recovered=None if recovered.outcome == "nothing" else recovered,
        )
    except BaseException as exc:
        error = _as_apply_error(exc)
        if journal is not None:
            try:
                report = rollback(journal, lambda e: states[e.path].data or b"", trusted=True)
            except BaseException as again:
                raise ApplyError(
                    f"{error.message}; rolling back failed too ({again!r}): "
                    "call recover(root) to finish it",
                    code="ERR_ROLLBACK_FAILED",
                    details={"cause": error.to_dict(), "rollback_error": repr(again)},
                ) from exc
            # If this fails the journal still says "prepared"; recover() rolls back again.
            with contextlib.suppress(OSError):
                journal.set_status("rolled_back")
            error = _with_report(error, report)
        if not isinstance(exc, Exception):
            raise
        if journal is not None:
            raise _RolledBack(error) from exc
        raise error from exc
    finally:
        if lock_fd is not None:
            tree.fs.close(lock_fd)
        tree.close()
