"""The transaction journal under ``<root>/.opsrun/``: begin, commit, roll back, recover, undo.

Layout::

    .opsrun/lock                      advisory lock held while a transaction runs
    .opsrun/current                   id of the newest transaction
    .opsrun/tx/<id>/manifest.json     status, the touched paths and their old state
    .opsrun/tx/<id>/blobs/<n>         old bytes of each touched file
    .opsrun/saved/<id>/<path>         old files a rollback could not put back (kept)

Every touched path's old state is durable before the first change. Rolling back
is idempotent (each step compares what is there with what should be), so it may
be interrupted and run again; :func:`recover` runs it for any transaction that
was neither committed nor rolled back. Temporary files carry the transaction id
in their name, so recovery can find and remove those a crash left behind.

A rollback never removes what the transaction did not write: a path now occupied
by a directory holding files, a symbolic link, a special file, or a file where the
transaction left a directory, is left as it is. A path that existed before is then
not restored, and its old files are copied to ``.opsrun/saved/<id>/`` (which
:func:`_prune` never removes), so nothing is lost either way.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from opsrun.errors import ApplyError

from ._fs import FileSystem, Occupant, PathState, Tree

__all__ = ["Journal", "RollbackReport", "TransactionOutcome", "recover", "undo"]

JOURNAL_DIR = ".opsrun"
_CURRENT = f"{JOURNAL_DIR}/current"
_COMMITTED = f"{JOURNAL_DIR}/committed"
"""The last committed transaction when a later one is current: the one undo reverts
while the current one rolled back."""
_LOCK = f"{JOURNAL_DIR}/lock"
_TX = f"{JOURNAL_DIR}/tx"
_SAVED = f"{JOURNAL_DIR}/saved"

Status = Literal["prepared", "committed", "rolled_back", "undoing", "undone"]
Kind = Literal["none", "dir", "file"]
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
        description="Paths the transaction created that were left in place because "
        "something it did not write is there: a directory holding files it did not create, "
        "or a symbolic link or special file (all untouched).",
    )
    not_restored: tuple[str, ...] = Field(
        default=(),
        description="Paths that existed before the transaction and were not given back, "
        "because something it did not write is there now (a directory holding files, a "
        "symbolic link, a special file, or a file where a directory was): that is left "
        "untouched, and the old files are copied under saved_to.",
    )
    saved_to: str | None = Field(
        default=None,
        description="Folder, relative to the root, holding the old files of the paths in "
        "not_restored at the same relative paths; None when there are none.",
    )
    setid_cleared: tuple[str, ...] = Field(
        default=(),
        description="Files restored from the journal without the setuid/setgid bits they had.",
    )


@dataclass
class RollbackReport:
    """What a rollback could not give back exactly (both empty: the old tree, byte for byte)."""

    kept: list[str]
    """Created paths left in place: something the transaction did not write is there."""
    setid_cleared: list[str]
    """Files restored without their setuid/setgid bits (modes read back from disk)."""
    not_restored: list[str] = field(default_factory=list)
    """Old paths not given back: something the transaction did not write is there now."""
    saved_to: str | None = None
    """Where the old files of ``not_restored`` were copied (relative to the root)."""


class _Entry(BaseModel):
    path: str
    kind: Kind
    mode: int = 0
    blob: str | None = None
    owner: tuple[int, int] | None = None
    new: Kind | None = None
    """What the transaction puts there (None in journals of older releases)."""


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


def begin(
    tree: Tree,
    states: dict[str, PathState],
    lock_fd: int,
    new: Mapping[str, Kind] | None = None,
) -> Journal:
    """Write the old state of every touched path durably and make it the current transaction.

    ``new`` says what the transaction puts at each path (a rollback tells by it a file it
    wrote from one it did not write where it made a directory).
    """
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
            _Entry(
                path=path,
                kind=state.kind,
                mode=state.mode,
                blob=blob,
                owner=state.owner,
                new=None if new is None else new.get(path),
            )
        )
    journal.manifest = journal.manifest.model_copy(update={"entries": entries})
    journal.set_status("prepared")
    committed = _last_committed(tree, lock_fd)
    pointer = b"" if committed is None else committed.encode()
    tree.write(_COMMITTED, pointer, 0o600, temp=journal.temp_name(), journal=True)
    tree.write(_CURRENT, tx_id.encode(), 0o600, temp=journal.temp_name(), journal=True)
    _prune(tree, keep={tx_id, committed})
    return journal


def _last_committed(tree: Tree, lock_fd: int) -> str | None:
    """The transaction undo reverts while no later one commits: the current one when it
    committed; after one that rolled back, the committed one before it."""
    current = _open(tree, lock_fd)
    if current is None:
        return None
    if current.manifest.status == "committed":
        return current.tx_id
    if current.manifest.status == "rolled_back":
        before = _open(tree, lock_fd, pointer=_COMMITTED)
        if before is not None and before.manifest.status == "committed":
            return before.tx_id
    return None


def _prune(tree: Tree, keep: set[str | None]) -> None:
    """Remove the journals of older transactions (best effort: leftovers are harmless)."""
    for name in tree.listdir(_TX, journal=True):
        if name in keep:
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

    Nothing the transaction did not write is removed, and the rollback does not fail for
    it. A directory the transaction created is removed only when empty: one that
    meanwhile received files it did not create (a check's ``__pycache__``, a user's
    file) is left in place with them, and so is a link or special file put where it
    created something; those paths are listed in ``kept``. A path that existed before
    and now holds something the transaction did not write (a directory holding files, a
    link, a special file, a file where a directory was, or such a thing on its way) is
    left as it is and listed in ``not_restored``; its old files are copied to
    ``.opsrun/saved/<tx_id>/`` (``saved_to``).

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
    blocked = _blocked(tree, entries)
    _remove_temps(tree, journal, entries, blocked)
    live = [e for e in entries if not _within(e.path, blocked)]
    for entry in sorted(live, key=lambda e: -_depth(e.path)):
        if entry.kind == "none" and not _remove_if_empty(tree, entry.path):
            report.kept.append(entry.path)
    for entry in sorted(live, key=lambda e: _depth(e.path)):
        if entry.kind == "dir":
            tree.mkdir(entry.path, entry.mode)
        elif entry.kind == "file":
            done = _restore_file(journal, entry, read(entry), trusted)
            if done == "blocked":  # a directory that gained files since it was looked at
                blocked.add(entry.path)
            elif done == "cleared":
                report.setid_cleared.append(entry.path)
    kinds = {e.path: e.kind for e in entries}
    for path in sorted(blocked):
        (report.kept if kinds[path] == "none" else report.not_restored).append(path)
    if report.not_restored:
        report.saved_to = _save(journal, entries, set(report.not_restored), read)
    return report


def _within(path: str, tops: Collection[str]) -> bool:
    """True when ``path`` is one of ``tops`` or lies below one of them."""
    segments = path.split("/")
    return any("/".join(segments[:n]) in tops for n in range(1, len(segments) + 1))


def _created_dirs(entries: list[_Entry]) -> set[str]:
    """Paths where the transaction made a directory: recorded as such, or (journals of
    older releases) holding another touched path."""
    created = {e.path for e in entries if e.kind == "none" and e.new == "dir"}
    absent = {e.path for e in entries if e.kind == "none"}
    for entry in entries:
        parent = entry.path.rpartition("/")[0]
        while parent:
            if parent in absent:
                created.add(parent)
            parent = parent.rpartition("/")[0]
    return created


def _occupant(tree: Tree, path: str) -> Occupant:
    """What is at ``path``; a link or a non-directory on its way counts as a link / special."""
    try:
        return tree.occupant(path)
    except ApplyError as exc:
        if exc.code == "ERR_PATH_SYMLINK":
            return "link"
        if exc.code == "ERR_TARGET_TYPE":
            return "special"
        raise


def _blocked(tree: Tree, entries: list[_Entry]) -> set[str]:
    """The touched paths a rollback must leave alone, with all that lies below them:
    each holds something the transaction did not write (a link or special file, at the
    path or on its way; a file where it left a directory; a directory holding something
    where it left a file). Looked at shallowest first; only reads.

    Raises:
        OSError, ApplyError: the file system failed.
    """
    made_dirs = _created_dirs(entries)
    blocked: set[str] = set()
    for entry in sorted(entries, key=lambda e: _depth(e.path)):
        if _within(entry.path, blocked):
            continue
        found = _occupant(tree, entry.path)
        if found in ("link", "special"):
            foreign = True  # the transaction never writes either
        elif found == "file":
            foreign = entry.kind == "dir" or entry.path in made_dirs
        elif found == "dir":
            foreign = entry.kind == "file" and bool(tree.listdir(entry.path))
        else:
            foreign = False
        if foreign:
            blocked.add(entry.path)
    return blocked


def _remove_temps(tree: Tree, journal: Journal, entries: list[_Entry], blocked: set[str]) -> None:
    """Remove the transaction's temporary files beside the touched paths."""
    parents = {e.path.rpartition("/")[0] for e in entries}
    for parent in sorted(p for p in parents if not (p and _within(p, blocked))):
        try:
            names = tree.listdir(parent)
        except ApplyError as exc:  # a link or a file on the way: nothing of ours there
            if exc.code in ("ERR_PATH_SYMLINK", "ERR_TARGET_TYPE"):
                continue
            raise
        for name in names:
            if name.startswith(journal.temp_prefix):
                tree.remove(f"{parent}/{name}" if parent else name)


def _restore_file(
    journal: Journal, entry: _Entry, old: bytes, trusted: bool
) -> Literal["blocked", "same", "written", "cleared"]:
    """Give the file entry its old bytes and mode.

    Returns ``blocked`` when a directory that is not empty is there (left as it is),
    ``same`` when the file already was as it should be, ``cleared`` when it was written
    without the set-id bits it had, ``written`` otherwise.
    """
    tree = journal.tree
    now = tree.state(entry.path)
    restore_setid = trusted and entry.owner is not None
    wanted = entry.mode if restore_setid else entry.mode & ~_SETID
    if now.kind == "dir":
        if not _remove_if_empty(tree, entry.path):
            return "blocked"
    elif (
        now.kind == "file"
        and now.data == old
        and now.mode == wanted
        and (not restore_setid or now.owner == entry.owner)
    ):
        return "same"
    tree.write(
        entry.path,
        old,
        entry.mode,
        temp=journal.temp_name(),
        keep_setid=restore_setid,
        owner=entry.owner,
        restore_owner=restore_setid,
    )
    return "cleared" if entry.mode & _SETID and not restore_setid else "written"


def _save(
    journal: Journal, entries: list[_Entry], tops: set[str], read: Callable[[_Entry], bytes]
) -> str:
    """Copy the old files at and below ``tops`` to ``.opsrun/saved/<tx_id>/`` (same
    relative paths, no set-id bits) and return that folder; safe to run again.

    Raises:
        OSError, ApplyError: the file system failed; the rollback may be run again.
    """
    tree = journal.tree
    folder = f"{_SAVED}/{journal.tx_id}"
    tree.mkdir(_SAVED, 0o700, journal=True)
    tree.mkdir(folder, 0o700, journal=True)
    inside = sorted((e for e in entries if _within(e.path, tops)), key=lambda e: _depth(e.path))
    for entry in inside:
        if entry.kind == "dir":
            tree.mkdir(f"{folder}/{entry.path}", 0o700, journal=True)
    files = [e for e in inside if e.kind == "file"]
    for parent in sorted({f"{folder}/{e.path}".rpartition("/")[0] for e in files}):
        for name in tree.listdir(parent, journal=True):
            if name.startswith(journal.temp_prefix):  # left by an interrupted copy
                tree.remove(f"{parent}/{name}", journal=True)
    for entry in files:
        target = f"{folder}/{entry.path}"
        tree.write(target, read(entry), entry.mode & 0o777, temp=journal.temp_name(), journal=True)
    return folder


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


def after_state(tree: Tree, paths: Iterable[str]) -> dict[str, str]:
    """Fingerprint the given paths as they are now (a link or a special file at a path or
    on its way is ``link`` / ``special``, never followed)."""
    return {p: _fingerprint_at(tree, p) for p in paths}


def _fingerprint_at(tree: Tree, path: str) -> str:
    """:func:`fingerprint` of what is at ``path``; ``link`` / ``special`` for what
    :meth:`Tree.state` refuses to read."""
    try:
        return fingerprint(tree.state(path))
    except ApplyError as exc:
        if exc.code == "ERR_PATH_SYMLINK":
            return "link"
        if exc.code == "ERR_TARGET_TYPE":
            return "special"
        raise


def _open(tree: Tree, lock_fd: int, *, pointer: str = _CURRENT) -> Journal | None:
    """The journal of the transaction ``pointer`` names (the current one by default)."""
    current = tree.state(pointer, journal=True)
    if current.kind != "file" or not current.data:
        return None
    tx_id = current.data.decode("ascii", "replace").strip()
    if not tx_id.isalnum():
        return None
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
        not_restored=tuple(report.not_restored),
        saved_to=report.saved_to,
        setid_cleared=tuple(report.setid_cleared),
    )


def _foreign(tree: Tree, entries: list[_Entry]) -> list[str]:
    """Touched paths holding what the transaction did not write: what lies inside the
    directories it created, and the paths an undo would have to leave alone (a
    directory holding files where a file was, a link, a special file, …)."""
    unique = _unique(entries)
    created = {e.path for e in unique if e.kind == "none"}
    found: list[str] = []
    for path in sorted(created):
        if _occupant(tree, path) != "dir":
            continue
        found += [f"{path}/{n}" for n in tree.listdir(path) if f"{path}/{n}" not in created]
    return found + sorted(_blocked(tree, unique))


def _changed(tree: Tree, manifest: _Manifest) -> list[str]:
    """The touched paths that are no longer as the transaction left them.

    Where the check had put something else than what the transaction wrote (a directory
    where it deleted a file, a link where it wrote one), nothing there now counts as
    unchanged too: that is what moving the check's leftover out of the way gives.
    """
    new = {e.path: e.new for e in _unique(manifest.entries)}
    now = after_state(tree, manifest.after)
    changed: list[str] = []
    for path, before in manifest.after.items():
        if now[path] == before:
            continue
        wrote = new.get(norm_path(path))
        if now[path] == "none" and wrote is not None and before.partition(":")[0] != wrote:
            continue
        changed.append(path)
    return changed


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
    call at any time and again after it fails. Nothing the transaction did not write is
    removed: a path it created that holds such things is left in place
    (``TransactionOutcome.kept``), and an old path where such a thing now is is not
    restored (``TransactionOutcome.not_restored``; its old files are copied under
    ``TransactionOutcome.saved_to``). Set-id bits are not restored from the journal
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

    The last committed transaction stays the one to undo after later ones that rolled
    back (a failed check changes nothing); once it is undone, or another commits, the
    one before it can no longer be undone.

    Raises:
        ApplyError: ``ERR_NOTHING_TO_UNDO`` when there is no committed transaction
            since the last undo; ``ERR_UNDO_CONFLICT`` when a touched path changed since, a
            directory it created holds something it did not create, or a touched path
            holds something it did not write that undo would have to remove (a
            directory holding files where it had a file, a link, a special file; nothing
            is reverted then; ``details["paths"]``); ``ERR_TX_BUSY``; ``ERR_IO`` (an
            undo cut short is finished by :func:`recover`).
    """
    try:
        tree = Tree(fs or FileSystem(), root)
    except OSError as exc:
        raise _io("undo", exc) from exc
    try:
        lock_fd, _ = open_locked(tree)
        try:
            journal = _open(tree, lock_fd)
            if journal is not None and journal.manifest.status == "rolled_back":
                # A failed apply changed nothing: the last commit is still the one to undo.
                # It becomes current again, so an undo cut short is found and finished.
                before = _open(tree, lock_fd, pointer=_COMMITTED)
                if before is not None and before.manifest.status == "committed":
                    tree.write(
                        _CURRENT,
                        before.tx_id.encode(),
                        0o600,
                        temp=before.temp_name(),
                        journal=True,
                    )
                    journal = before
            if journal is None or journal.manifest.status != "committed":
                raise ApplyError(
                    "there is no committed transaction to undo",
                    code="ERR_NOTHING_TO_UNDO",
                    details={"status": None if journal is None else journal.manifest.status},
                )
            changed = _changed(tree, journal.manifest)
            # A directory's fingerprint is only "dir": what was added inside one it created,
            # or a directory holding files where it had a file (the check made it before
            # the commit), shows up here; undo would otherwise delete around it or over it.
            changed = sorted({*changed, *_foreign(tree, journal.manifest.entries)})
            if changed:
                raise ApplyError(
                    f"cannot undo: {len(changed)} path(s) changed or added since the transaction "
                    f"or holding what it did not write, first {changed[0]!r}",
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
