"""The transaction journal under ``<root>/.opsrun/``: begin, commit, roll back, recover, undo.

Layout::

    .opsrun/lock                      advisory lock held while a transaction runs
    .opsrun/current                   id of the newest transaction
    .opsrun/tx/<id>/manifest.json     status, the touched paths and their old state
    .opsrun/tx/<id>/blobs/<n>         old bytes of each touched file

Every touched path's old state is durable before the first change. Rolling back
is idempotent (each step compares what is there with what should be), so it may
be interrupted and run again; :func:`recover` runs it for any transaction that
was neither committed nor rolled back. Temporary files carry the transaction id
in their name, so recovery can find and remove those a crash left behind.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from opsrun.errors import ApplyError

from ._fs import FileSystem, PathState, Tree

__all__ = ["Journal", "RollbackReport", "TransactionOutcome", "recover", "undo"]

JOURNAL_DIR = ".opsrun"
_CURRENT = f"{JOURNAL_DIR}/current"
_LOCK = f"{JOURNAL_DIR}/lock"
_TX = f"{JOURNAL_DIR}/tx"

Status = Literal["prepared", "committed", "rolled_back", "undoing", "undone"]
_SETID = stat.S_ISUID | stat.S_ISGID


class TransactionOutcome(BaseModel):
    """What :func:`recover` or :func:`undo` did."""

    model_config = ConfigDict(frozen=True)

    tx_id: str | None = Field(description="The transaction concerned; None when there was none.")
    outcome: Literal["nothing", "rolled_back", "undone"] = Field(
        description="nothing to do, an interrupted transaction was rolled back, or undo finished."
    )
    kept: tuple[str, ...] = Field(
        default=(),
        description="Directories the transaction created that were left in place because "
        "they hold files it did not create (those files are untouched).",
    )
    setid_cleared: tuple[str, ...] = Field(
        default=(),
        description="Files restored from the journal without the setuid/setgid bits they had.",
    )


@dataclass
class RollbackReport:
    """What a rollback could not give back exactly (both empty: the old tree, byte for byte)."""

    kept: list[str]
    """Created directories left in place: they hold files the transaction did not create."""
    setid_cleared: list[str]
    """Files restored without their setuid/setgid bits (modes read back from disk)."""


class _Entry(BaseModel):
    path: str
    kind: Literal["none", "dir", "file"]
    mode: int = 0
    blob: str | None = None
    owner: tuple[int, int] | None = None


class _Manifest(BaseModel):
    version: int = 1
    tx_id: str
    status: Status
    entries: list[_Entry]
    after: dict[str, str] = Field(default_factory=dict)


def _depth(path: str) -> int:
    return path.count("/")


def norm_path(path: str) -> str:
    """Return ``path`` as the tree resolves it: ``\\`` separates, empty segments (``src/``) go."""
    return "/".join(s for s in path.replace("\\", "/").split("/") if s)


def _unique(entries: Iterable[_Entry]) -> list[_Entry]:
    """One entry per path the tree resolves to (``src/new/`` and ``src/new`` are one
    directory: removing it twice, the first time before its files, would fail)."""
    seen: dict[str, _Entry] = {}
    for entry in entries:
        seen.setdefault(
            norm_path(entry.path), entry.model_copy(update={"path": norm_path(entry.path)})
        )
    return list(seen.values())


def fingerprint(state: PathState) -> str:
    """Return a compact description of a path's state, for undo's safety check."""
    if state.kind == "file":
        digest = hashlib.sha256(state.data or b"").hexdigest()
        return f"file:{state.mode:o}:{digest}"
    return state.kind


@dataclass
class Journal:
    """An open transaction's journal."""

    tree: Tree
    manifest: _Manifest
    lock_fd: int | None = None

    @property
    def tx_id(self) -> str:
        """The transaction id."""
        return self.manifest.tx_id

    @property
    def temp_prefix(self) -> str:
        """Prefix of every temporary file this transaction creates."""
        return f".opsrun-{self.tx_id}-"

    def temp_name(self) -> str:
        """A fresh temporary file name for an atomic write."""
        return f"{self.temp_prefix}{secrets.token_hex(6)}.tmp"

    def _dir(self) -> str:
        return f"{_TX}/{self.tx_id}"

    def _save(self, *, sync_dir: bool = True) -> None:
        # ASCII JSON: a file name that is not UTF-8 (os.listdir gives it back with lone
        # surrogates) is kept as a \udcXX escape, losslessly, instead of failing to encode.
        data = json.dumps(self.manifest.model_dump(), ensure_ascii=True).encode("ascii")
        self.tree.write(
            f"{self._dir()}/manifest.json",
            data,
            0o600,
            temp=self.temp_name(),
            journal=True,
            sync_dir=sync_dir,
        )

    def set_status(self, status: Status, after: dict[str, str] | None = None) -> None:
        """Record a new status durably."""
        update: dict[str, object] = {"status": status}
        if after is not None:
            update["after"] = after
        self.manifest = self.manifest.model_copy(update=update)
        self._save()

    def commit(self, after: dict[str, str]) -> None:
        """Record the commit; once its rename is done the transaction counts as committed.

        The directory fsync that follows is best effort: if it fails, the caller has
        still seen the new tree and the journal on disk says so, and reporting a
        failure then would contradict what :func:`recover` finds.
        """
        self.manifest = self.manifest.model_copy(update={"status": "committed", "after": after})
        self._save(sync_dir=False)
        with contextlib.suppress(OSError):
            self.tree.sync_parent(f"{self._dir()}/manifest.json", journal=True)

    def blob(self, entry: _Entry) -> bytes:
        """Read back the old bytes of a file entry."""
        state = self.tree.state(f"{self._dir()}/blobs/{entry.blob}", journal=True)
        if state.data is None:
            raise ApplyError(
                f"journal blob {entry.blob} for {entry.path!r} is missing",
                code="ERR_JOURNAL_CORRUPT",
                details={"tx_id": self.tx_id, "path": entry.path},
            )
        return state.data

    def close(self) -> None:
        """Release the lock (closing its descriptor)."""
        if self.lock_fd is not None:
            self.tree.fs.close(self.lock_fd)
            self.lock_fd = None


def lock(tree: Tree) -> int:
    """Take the root's transaction lock and return its descriptor.

    Raises:
        ApplyError: ``ERR_TX_BUSY`` when another transaction holds it.
    """
    ensure_dir(tree)
    found = tree.parent(_LOCK, journal=True)
    assert found is not None
    dir_fd, leaf = found
    try:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = tree.fs.open(leaf, flags, mode=0o600, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise ApplyError(
                f"{_LOCK!r} is a symbolic link; the journal never follows links",
                code="ERR_PATH_SYMLINK",
                details={"path": _LOCK},
            ) from exc
    finally:
        tree.fs.close(dir_fd)
    try:
        if not tree.fs.lock(fd):
            raise ApplyError(
                f"another transaction is running in {tree.root}",
                code="ERR_TX_BUSY",
                details={"root": tree.root},
            )
    except BaseException:
        tree.fs.close(fd)
        raise
    return fd


_GITIGNORE = f"{JOURNAL_DIR}/.gitignore"
_GITIGNORE_TEMP = ".gitignore.opsrun-tmp"
_GITIGNORE_TEXT = (
    b"# opsrun's journal and traces; project.json holds shared preferences\n*\n!project.json\n"
)


def ensure_dir(tree: Tree, path: str = JOURNAL_DIR) -> None:
    """Create ``path`` (``.opsrun`` or a directory inside it) and keep ``.opsrun`` out of
    ``git status``: the one way every writer of ``.opsrun`` prepares it.

    Raises:
        ApplyError: ``ERR_PATH_SYMLINK`` when ``.opsrun`` or a directory on the way is a
            link (nothing is written through it), ``ERR_TARGET_TYPE`` when one is not a
            directory.
        OSError: a directory cannot be created.
    """
    tree.mkdir(path, 0o755, journal=True)
    _ignore_itself(tree)


def _ignore_itself(tree: Tree) -> None:
    """Keep ``.opsrun/`` out of ``git status``: a ``.gitignore`` inside it ignores all of it
    but ``project.json`` (the project's preferences, meant to be committed).

    Best effort: a failure here never stops a transaction (the next one tries again).
    """
    try:
        if tree.state(_GITIGNORE, journal=True).data == _GITIGNORE_TEXT:
            return
        leftover = f"{JOURNAL_DIR}/{_GITIGNORE_TEMP}"
        if tree.state(leftover, read=False, journal=True).kind != "none":
            tree.remove(leftover, journal=True)
        tree.write(_GITIGNORE, _GITIGNORE_TEXT, 0o644, temp=_GITIGNORE_TEMP, journal=True)
    except OSError:
        return


def begin(tree: Tree, states: dict[str, PathState], lock_fd: int) -> Journal:
    """Write the old state of every touched path durably and make it the current transaction."""
    tx_id = secrets.token_hex(8)
    entries: list[_Entry] = []
    journal = Journal(tree, _Manifest(tx_id=tx_id, status="prepared", entries=[]), lock_fd)
    for n, (path, state) in enumerate(states.items()):
        blob = None
        if state.kind == "file":
            blob = str(n)
            tree.write(
                f"{_TX}/{tx_id}/blobs/{blob}",
                state.data or b"",
                0o600,
                temp=journal.temp_name(),
                journal=True,
            )
        entries.append(
            _Entry(path=path, kind=state.kind, mode=state.mode, blob=blob, owner=state.owner)
        )
    journal.manifest = journal.manifest.model_copy(update={"entries": entries})
    journal.set_status("prepared")
    tree.write(_CURRENT, tx_id.encode(), 0o600, temp=journal.temp_name(), journal=True)
    _prune(tree, keep=tx_id)
    return journal


def _prune(tree: Tree, keep: str) -> None:
    """Remove the journals of older transactions (best effort: leftovers are harmless)."""
    for name in tree.listdir(_TX, journal=True):
        if name == keep:
            continue
        try:
            for sub, _ in reversed(tree.walk(f"{_TX}/{name}", journal=True)):
                tree.remove(sub, journal=True)
        except (OSError, ApplyError):
            return


def rollback(
    journal: Journal, data: Callable[[_Entry], bytes] | None = None, *, trusted: bool = False
) -> RollbackReport:
    """Put every touched path back as it was; safe to run again after an interruption.

    A directory the transaction created is removed only when empty: one that meanwhile
    received files the transaction did not create (a check's ``__pycache__``, a user's
    file) is left in place with them and listed in the report, so a rollback never
    deletes foreign files and never fails for them.

    Args:
        journal: The transaction.
        data: Where old file bytes come from (default: the journal's blobs).
        trusted: The entries come from this process's own snapshot, not from a journal
            read back from disk: set-id bits are then restored (with the old owner).
            Otherwise they are cleared and the files listed in the report.

    Raises:
        OSError, ApplyError: the file system failed; the rollback may be run again.
    """
    tree = journal.tree
    entries = _unique(journal.manifest.entries)
    read = data or journal.blob
    report = RollbackReport(kept=[], setid_cleared=[])
    parents = sorted({e.path.rpartition("/")[0] for e in entries})
    for parent in parents:
        for name in tree.listdir(parent):
            if name.startswith(journal.temp_prefix):
                tree.remove(f"{parent}/{name}" if parent else name)
    for entry in sorted(entries, key=lambda e: -_depth(e.path)):
        stale_file = entry.kind == "dir" and tree.state(entry.path, read=False).kind == "file"
        if (entry.kind == "none" or stale_file) and not _remove_if_empty(tree, entry.path):
            report.kept.append(entry.path)
    for entry in sorted(entries, key=lambda e: _depth(e.path)):
        if entry.kind == "dir":
            tree.mkdir(entry.path, entry.mode)
        elif entry.kind == "file":
            old = read(entry)
            now = tree.state(entry.path)
            restore_setid = trusted and entry.owner is not None
            wanted = entry.mode if restore_setid else entry.mode & ~_SETID
            if now.kind == "dir":
                _remove_tree(tree, entry.path)
            elif (
                now.kind == "file"
                and now.data == old
                and now.mode == wanted
                and (not restore_setid or now.owner == entry.owner)
            ):
                continue
            tree.write(
                entry.path,
                old,
                entry.mode,
                temp=journal.temp_name(),
                keep_setid=restore_setid,
                owner=entry.owner,
                restore_owner=restore_setid,
            )
            if entry.mode & _SETID and not restore_setid:
                report.setid_cleared.append(entry.path)
    return report


def _remove_if_empty(tree: Tree, path: str) -> bool:
    """Remove the file or empty directory at ``path``; False when it is a directory that
    still holds something (it is left as it is)."""
    try:
        tree.remove(path)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def _remove_tree(tree: Tree, path: str) -> None:
    for sub, _ in reversed(tree.walk(path)):
        tree.remove(sub)


def after_state(tree: Tree, paths: Iterable[str]) -> dict[str, str]:
    """Fingerprint the given paths as they are now."""
    return {p: fingerprint(tree.state(p)) for p in paths}


def _open(tree: Tree, lock_fd: int) -> Journal | None:
    current = tree.state(_CURRENT, journal=True)
    if current.kind != "file" or not current.data:
        return None
    tx_id = current.data.decode("ascii", "replace").strip()
    raw = tree.state(f"{_TX}/{tx_id}/manifest.json", journal=True)
    if raw.kind != "file" or raw.data is None:
        return None
    try:
        manifest = _Manifest.model_validate(json.loads(raw.data))
    except ValueError as exc:
        raise ApplyError(
            f"the journal of transaction {tx_id} is unreadable: {exc}",
            code="ERR_JOURNAL_CORRUPT",
            details={"tx_id": tx_id},
        ) from exc
    return Journal(tree, manifest, lock_fd)


def _finish_pending(journal: Journal) -> TransactionOutcome:
    status = journal.manifest.status
    if status not in ("prepared", "undoing"):
        return TransactionOutcome(tx_id=journal.tx_id, outcome="nothing")
    report = rollback(journal)
    journal.set_status("rolled_back" if status == "prepared" else "undone")
    return _outcome(journal, "rolled_back" if status == "prepared" else "undone", report)


def _outcome(
    journal: Journal, outcome: Literal["rolled_back", "undone"], report: RollbackReport
) -> TransactionOutcome:
    return TransactionOutcome(
        tx_id=journal.tx_id,
        outcome=outcome,
        kept=tuple(report.kept),
        setid_cleared=tuple(report.setid_cleared),
    )


def _foreign(tree: Tree, entries: list[_Entry]) -> list[str]:
    """Paths inside the directories the transaction created that it did not create."""
    created = {e.path for e in _unique(entries) if e.kind == "none"}
    found: list[str] = []
    for path in sorted(created):
        if tree.state(path, read=False).kind != "dir":
            continue
        found += [f"{path}/{n}" for n in tree.listdir(path) if f"{path}/{n}" not in created]
    return found


def open_locked(tree: Tree) -> tuple[int, TransactionOutcome]:
    """Lock the root and finish any interrupted transaction; return the lock and what was done."""
    lock_fd = lock(tree)
    try:
        journal = _open(tree, lock_fd)
        outcome = (
            TransactionOutcome(tx_id=None, outcome="nothing")
            if journal is None
            else _finish_pending(journal)
        )
    except BaseException:
        tree.fs.close(lock_fd)
        raise
    return lock_fd, outcome


def _io(action: str, exc: OSError) -> ApplyError:
    return ApplyError(
        f"{action} failed: {exc.strerror or exc}",
        code="ERR_IO",
        details={"errno": exc.errno, "error": str(exc)},
    )


def recover(root: str | os.PathLike[str], *, fs: FileSystem | None = None) -> TransactionOutcome:
    """Bring an interrupted transaction in ``root`` back to the old tree.

    A transaction that committed is left as it is (the new tree); one that did not
    is rolled back (the old tree); an interrupted :func:`undo` is finished. Safe to
    call at any time and again after it fails. A directory the transaction created
    that holds files it did not create is left in place with them
    (``TransactionOutcome.kept``); set-id bits are not restored from the journal
    (``TransactionOutcome.setid_cleared``).

    Raises:
        ApplyError: ``ERR_TX_BUSY`` while another transaction runs, ``ERR_IO`` when
            the file system fails (call again), ``ERR_JOURNAL_CORRUPT``.
    """
    try:
        tree = Tree(fs or FileSystem(), root)
    except OSError as exc:
        raise _io("recover", exc) from exc
    try:
        lock_fd, outcome = open_locked(tree)
        tree.fs.close(lock_fd)
        return outcome
    except OSError as exc:
        raise _io("recover", exc) from exc
    finally:
        tree.close()


def undo(root: str | os.PathLike[str], *, fs: FileSystem | None = None) -> TransactionOutcome:
    """Revert the last committed transaction in ``root``.

    Set-id bits are not restored from the journal: the files concerned are listed in
    ``TransactionOutcome.setid_cleared``.

    Raises:
        ApplyError: ``ERR_NOTHING_TO_UNDO`` when the last transaction is not a
            committed one; ``ERR_UNDO_CONFLICT`` when a touched path changed since, or
            a directory it created holds something it did not create (nothing is
            reverted then; ``details["paths"]``); ``ERR_TX_BUSY``; ``ERR_IO`` (an undo
            cut short is finished by :func:`recover`).
    """
    try:
        tree = Tree(fs or FileSystem(), root)
    except OSError as exc:
        raise _io("undo", exc) from exc
    try:
        lock_fd, _ = open_locked(tree)
        try:
            journal = _open(tree, lock_fd)
            if journal is None or journal.manifest.status != "committed":
                raise ApplyError(
                    "there is no committed transaction to undo",
                    code="ERR_NOTHING_TO_UNDO",
                    details={"status": None if journal is None else journal.manifest.status},
                )
            after = journal.manifest.after
            now = after_state(tree, after)
            changed = [p for p, f in after.items() if now[p] != f]
            # A created directory's fingerprint is only "dir": what was added inside it
            # shows up here, and undo would otherwise delete around it and stop half-way.
            changed = sorted({*changed, *_foreign(tree, journal.manifest.entries)})
            if changed:
                raise ApplyError(
                    f"cannot undo: {len(changed)} path(s) changed or added since the transaction, "
                    f"first {changed[0]!r}",
                    code="ERR_UNDO_CONFLICT",
                    details={"tx_id": journal.tx_id, "paths": changed},
                )
            journal.set_status("undoing")
            report = rollback(journal)
            journal.set_status("undone")
            return _outcome(journal, "undone", report)
        finally:
            tree.fs.close(lock_fd)
    except OSError as exc:
        raise _io("undo", exc) from exc
    finally:
        tree.close()
