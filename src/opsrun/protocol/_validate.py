"""validate_plan: every protocol rule, all violations reported at once."""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Collection
from typing import Literal

from ._content import (
    added_elision_line,
    count_non_printable,
    elision_line,
    is_sha256_hex,
    looks_like_unified_diff,
    utf8,
)
from ._fscheck import check_tree
from ._limits import PathPolicy, PlanLimits, Violation
from ._memory import check_memory_patch
from ._paths import (
    clean_keys,
    clean_paths,
    collision_key,
    may_be_protected,
    path_codes,
    path_segments,
    protected_match,
    whitelist_file_problem,
)
from ._plan import (
    CONTENT_KINDS,
    EDIT_KINDS,
    V2_ONLY_KINDS,
    Action,
    ActionKind,
    ContextRequestType,
    Plan,
)

__all__ = ["NO_CHANGES_PREFIX", "validate_plan"]

#: An APPLY answer without actions must have a summary starting with this.
NO_CHANGES_PREFIX = "NO_CHANGES:"

Mode = Literal["plan", "apply"]
_Add = Callable[[str, str], None]
_DEFAULT_LIMITS = PlanLimits()
_DEFAULT_POLICY = PathPolicy()

_K = ActionKind
# Optional fields each kind may carry (v2). v1 actions carry content only.
_ALLOWED_FIELDS: dict[ActionKind, frozenset[str]] = {
    _K.CREATE_FILE: frozenset({"content"}),
    _K.UPDATE_FILE: frozenset({"content", "base_sha256"}),
    _K.PATCH_FILE: frozenset({"patch", "base_sha256"}),
    _K.REPLACE_RANGE: frozenset({"content", "base_sha256", "start_line", "end_line"}),
    _K.CREATE_DIR: frozenset(),
    _K.DELETE_FILE: frozenset(),
    _K.DELETE_DIR: frozenset(),
}
_OPTIONAL_FIELDS = ("content", "patch", "base_sha256", "start_line", "end_line")
# The optional fields each kind must not carry, in the order they are reported.
_FORBIDDEN_FIELDS: dict[ActionKind, tuple[str, ...]] = {
    kind: tuple(name for name in _OPTIONAL_FIELDS if name not in allowed)
    for kind, allowed in _ALLOWED_FIELDS.items()
}
_V1_FORBIDDEN_FIELDS = tuple(name for name in _OPTIONAL_FIELDS if name != "content")
# Members read once: looking one up on the enum class costs more than the test itself.
_CREATE_FILE = _K.CREATE_FILE
_PATCH_FILE = _K.PATCH_FILE
_REPLACE_RANGE = _K.REPLACE_RANGE
_DELETE_DIR = _K.DELETE_DIR
_BASED_KINDS = frozenset({_PATCH_FILE, _REPLACE_RANGE})
_DELETE_KINDS = frozenset({_K.DELETE_FILE, _K.DELETE_DIR})
_PAYLOAD_KINDS = CONTENT_KINDS | {_K.PATCH_FILE}
_PROTECTED_KINDS = EDIT_KINDS | _DELETE_KINDS
_DIR_KINDS = frozenset({_K.CREATE_DIR, _K.DELETE_DIR})
_IDEMPOTENT = frozenset({_K.CREATE_DIR, _K.DELETE_DIR, _K.DELETE_FILE})
_FILE_WRITE_KINDS = frozenset(ActionKind) - _DIR_KINDS - _DELETE_KINDS
_NO_CODES: dict[str, str] = {}  # read only
_CONTEXT_TYPES = frozenset(t.value for t in ContextRequestType)
_UNSAFE_GLOB_CODES = frozenset(
    {"ERR_PATH_ABSOLUTE", "ERR_PATH_UNC", "ERR_PATH_DRIVE", "ERR_PATH_HOME", "ERR_PATH_TRAVERSAL"}
)


def read_key(path: str) -> str:
    return "/".join(s for s in path_segments(unicodedata.normalize("NFC", path)) if s != ".")


def validate_plan(
    plan: Plan,
    *,
    mode: Mode = "apply",
    root: str | os.PathLike[str] | None = None,
    read_paths: Collection[str] | None = None,
    limits: PlanLimits | None = None,
    policy: PathPolicy | None = None,
) -> list[Violation]:
    """Check a parsed plan against every protocol rule and return all violations.

    Args:
        plan: The plan to check.
        mode: ``"plan"`` (no actions allowed, a summary required) or ``"apply"``.
        root: Project directory; when given, rules that look at files run too
            (CREATE over an existing file, v2 UPDATE_FILE on an existing file,
            base hashes, missing targets, symlinks leaving the root).
        read_paths: Files read during PLAN. ``None`` means unknown and skips the
            UPDATE-without-base rule; an empty collection means nothing was read.
        limits: Size limits (defaults: :class:`PlanLimits`).
        policy: Path policy (defaults: :class:`PathPolicy`).

    Returns:
        Violations in plan order (plan-level first). Warnings do not block; see
        :attr:`Violation.blocking`. An empty list means the plan may be applied.
        Never raises: an unexpected internal failure is reported as
        ``ERR_VALIDATION_INTERNAL``.
    """
    try:
        return _Run(
            plan,
            mode,
            None if root is None else os.fspath(root),
            read_paths,
            limits or _DEFAULT_LIMITS,
            policy or _DEFAULT_POLICY,
        ).run()
    except Exception as exc:  # the documented contract is "never raises"
        return [Violation(code="ERR_VALIDATION_INTERNAL", message=f"validation failed: {exc!r}")]


def _spelled(path: str) -> str:
    """A path as written, with ``\\`` as ``/`` and no trailing ``/``."""
    return "/".join(path_segments(path))


def _any_inside(parents: set[str], keys: list[str], lexically_ok: list[bool]) -> bool:
    """Whether a lexically safe action's key lies strictly inside one of ``parents``.

    Walks up the directories of all keys a level at a time; actions share directories,
    so each level is a small set.
    """
    if not parents:
        return False
    level = {
        key.rpartition("/")[0]
        for key, ok in zip(keys, lexically_ok, strict=True)
        if ok and "/" in key
    }
    while level:
        if not parents.isdisjoint(level):
            return True
        level = {d.rpartition("/")[0] for d in level if "/" in d}
    return False


class _Run:
    def __init__(
        self,
        plan: Plan,
        mode: str,
        root: str | None,
        read_paths: Collection[str] | None,
        limits: PlanLimits,
        policy: PathPolicy,
    ) -> None:
        self.plan = plan
        self.mode = mode
        self.root = root
        self.read = None if read_paths is None else {read_key(p) for p in read_paths}
        self.limits = limits
        self.policy = policy
        self.version = plan.version
        actions = plan.actions
        # Facts settled for all actions in one pass each; False or True means: look closer.
        self.all_clean = clean_paths([a.path for a in actions], limits, policy)
        self.any_protected = may_be_protected(
            [a.path for a in actions if a.kind in _PROTECTED_KINDS], policy.protected
        )
        self.out: list[Violation] = []

    def add(
        self,
        code: str,
        message: str,
        *,
        path: str | None = None,
        index: int | None = None,
        context_index: int | None = None,
    ) -> None:
        self.out.append(
            Violation(
                code=code,
                message=message,
                path=path,
                action_index=index,
                context_index=context_index,
            )
        )

    def run(self) -> list[Violation]:
        self._plan_level()
        total = 0
        unsized: list[str] = []
        lexically_ok: list[bool] = []
        for index, action in enumerate(self.plan.actions):
            ok, size = self._action(index, action)
            lexically_ok.append(ok)
            if isinstance(size, str):
                unsized.append(size)
            else:
                total += size
        # Below the bound of 4 bytes a character the exact total cannot break the limit.
        if unsized and total + 4 * sum(map(len, unsized)) > self.limits.max_total_content_bytes:
            total += sum(len(utf8(text)) for text in unsized)
        if total > self.limits.max_total_content_bytes:
            self.add(
                "ERR_CONTENT_TOO_LARGE",
                f"content and patches total {total} bytes; the limit is "
                f"{self.limits.max_total_content_bytes}",
            )
        self._conflicts(lexically_ok)
        if self.root is not None:
            self.out.extend(
                check_tree(
                    [(i, a) for i, a in enumerate(self.plan.actions) if lexically_ok[i]],
                    version=self.plan.version,
                    root=self.root,
                    policy=self.policy,
                )
            )
        self._context_requests()
        _, memory = check_memory_patch(
            self.plan.memory_patch, block_unknown=self.policy.block_unknown_memory_keys
        )
        self.out.extend(memory)
        return self.out

    def _plan_level(self) -> None:
        plan = self.plan
        if self.mode not in ("plan", "apply"):
            self.add("ERR_MODE_INVALID", f"mode must be 'plan' or 'apply', not {self.mode!r}")
        if len(plan.actions) > self.limits.max_actions:
            self.add(
                "ERR_TOO_MANY_ACTIONS",
                f"plan has {len(plan.actions)} actions; the limit is {self.limits.max_actions}",
            )
        if self.mode == "plan":
            if plan.actions:
                self.add("ERR_PLAN_HAS_ACTIONS", "a PLAN answer must have no actions")
            if not (plan.summary or "").strip():
                self.add("ERR_PLAN_SUMMARY_REQUIRED", "a PLAN answer needs a summary")
        elif (
            self.mode == "apply"
            and not plan.actions
            and not (plan.summary or "").startswith(NO_CHANGES_PREFIX)
        ):
            self.add(
                "ERR_NO_CHANGES_MARKER",
                f"an APPLY answer without actions needs a summary starting {NO_CHANGES_PREFIX!r}",
            )

    def _action(self, index: int, action: Action) -> tuple[bool, int | str]:
        """Check one action's own rules.

        Returns whether the path is lexically safe, and the payload's UTF-8 size or, when
        that was not needed yet, the payload itself.
        """
        path = action.path
        kind = action.kind
        version = self.version
        policy = self.policy

        def add(code: str, message: str) -> None:
            self.add(code, message, path=path, index=index)

        codes = _NO_CODES if self.all_clean else path_codes(path, self.limits, policy)
        if codes:
            for code, message in codes.items():
                add(code, message)
        if version == 1 and kind in V2_ONLY_KINDS:
            add("ERR_KIND_NOT_IN_VERSION", f"{kind.value} needs protocol v2")
        for name in _FORBIDDEN_FIELDS[kind] if version == 2 else _V1_FORBIDDEN_FIELDS:
            if getattr(action, name) is not None:
                add("ERR_FIELD_NOT_ALLOWED", f"{kind.value} must not carry {name}")
        self._required_fields(action, kind, add)
        size = self._payload(action, kind, add) if kind in _PAYLOAD_KINDS else 0
        if self.any_protected and kind in _PROTECTED_KINDS:
            pattern = protected_match(path, policy.protected, is_dir=kind is _DELETE_DIR)
            if pattern is not None:
                add("ERR_PROTECTED_PATH", f"{kind.value} of a protected path ({pattern})")
        if policy.use_whitelist and kind in _FILE_WRITE_KINDS and not codes:
            problem = whitelist_file_problem(path, policy)
            if problem is not None:
                add("ERR_FORBIDDEN_PATH", problem)
        if (
            self.read is not None
            and self.mode == "apply"
            and kind in EDIT_KINDS
            and not codes
            and read_key(path) not in self.read
        ):
            add("ERR_UPDATE_WITHOUT_BASE", f"{kind.value} of a file that was not read in PLAN")
        return not codes, size

    def _required_fields(self, action: Action, kind: ActionKind, add: _Add) -> None:
        if kind in CONTENT_KINDS and action.content is None:
            add("ERR_CONTENT_REQUIRED", f"{kind.value} needs content")
        base_sha256 = action.base_sha256
        if kind is _PATCH_FILE:
            if action.patch is None:
                add("ERR_CONTENT_REQUIRED", "PATCH_FILE needs patch")
            elif not looks_like_unified_diff(action.patch):
                add("ERR_PATCH_NOT_UNIFIED", "patch has no '@@ -a,b +c,d @@' hunk header")
        if base_sha256 is not None and not is_sha256_hex(base_sha256):
            add("ERR_BASE_SHA256_INVALID", "base_sha256 must be 64 hexadecimal digits")
        if self.version == 2 and kind in _BASED_KINDS and base_sha256 is None:
            add("ERR_BASE_SHA256_REQUIRED", f"{kind.value} needs base_sha256")
        if kind is _REPLACE_RANGE:
            start, end = action.start_line, action.end_line
            if start is None or end is None:
                add("ERR_RANGE_INVALID", "REPLACE_RANGE needs start_line and end_line")
            elif start < 1 or end < start:
                add("ERR_RANGE_INVALID", f"line range {start}..{end} is not 1 <= start <= end")

    def _payload(self, action: Action, kind: ActionKind, add: _Add) -> int | str:
        """Check content / patch text (of a kind that carries one).

        Returns its UTF-8 size, or the text when that size was not needed yet.
        """
        text = action.patch if kind is _PATCH_FILE else action.content
        if text is None:
            return 0
        limits = self.limits
        # The UTF-8 size is len(text) for ASCII and at most 4 bytes a character; encode
        # only when the per-action limit or the binary ratio needs the exact number.
        size = len(text) if text.isascii() else None
        if size is None and 4 * len(text) > limits.max_file_bytes:
            size = len(utf8(text))
        if size is not None and size > limits.max_file_bytes:
            add(
                "ERR_FILE_TOO_LARGE",
                f"{size} bytes in one action; the limit is {limits.max_file_bytes}",
            )
        # NUL, C0 controls and DEL are ASCII, and UTF-8 bytes >= 0x80 count as printable:
        # Latin-1 bytes (dropping what Latin-1 cannot hold) have the same NUL and count.
        # NUL counts too: a text with none of them needs no other look.
        binary = count_non_printable(text.encode("latin-1", "ignore"))
        if binary:
            if "\0" in text:
                add("ERR_CONTENT_NUL", "content contains a NUL byte")
            else:
                if size is None:
                    size = len(utf8(text))
                if binary > size * limits.pseudo_binary_ratio:
                    add("ERR_PSEUDO_BINARY", "content looks binary (too many control characters)")
        policy = self.policy
        if policy.check_elided_content and (
            kind in EDIT_KINDS or (kind is _CREATE_FILE and policy.check_elided_in_creates)
        ):
            line = added_elision_line(text) if kind is _PATCH_FILE else elision_line(text)
            if line is not None:
                add("ERR_ELIDED_CONTENT", f"new text elides code with a placeholder: {line[:80]!r}")
        return text if size is None else size

    def _conflicts(self, lexically_ok: list[bool]) -> None:
        if self.all_clean:
            keys = clean_keys([action.path for action in self.plan.actions])
        else:
            keys = [
                collision_key(action.path) if ok else ""
                for action, ok in zip(self.plan.actions, lexically_ok, strict=True)
            ]
        files, deleted_dirs = self._same_path_conflicts(lexically_ok, keys)
        if _any_inside(files.keys() | deleted_dirs.keys(), keys, lexically_ok):
            self._nested_conflicts(lexically_ok, keys, files, deleted_dirs)

    def _same_path_conflicts(
        self, lexically_ok: list[bool], keys: list[str]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Report actions on one path; return the file paths and deleted directories by key."""
        seen: dict[str, tuple[int, Action]] = {}
        files: dict[str, int] = {}
        deleted_dirs: dict[str, int] = {}
        for index, action in enumerate(self.plan.actions):
            if not lexically_ok[index]:
                continue
            key = keys[index]
            if key in seen:
                first, other = seen[key]
                if _spelled(action.path) != _spelled(other.path):
                    self.add(
                        "ERR_PATH_COLLISION",
                        f"path collides with action {first} ({other.path!r}) after Unicode "
                        "normalisation and case folding",
                        path=action.path,
                        index=index,
                    )
                elif not (action.kind == other.kind and action.kind in _IDEMPOTENT):
                    self.add(
                        "ERR_ACTION_CONFLICT",
                        f"{action.kind.value} conflicts with {other.kind.value} "
                        f"(action {first}) on the same path",
                        path=action.path,
                        index=index,
                    )
                continue
            seen[key] = (index, action)
            if action.kind not in _DIR_KINDS:
                files[key] = index
            elif action.kind is _K.DELETE_DIR:
                deleted_dirs[key] = index
        return files, deleted_dirs

    def _nested_conflicts(
        self,
        lexically_ok: list[bool],
        keys: list[str],
        files: dict[str, int],
        deleted_dirs: dict[str, int],
    ) -> None:
        """Report actions inside a path another action writes as a file or deletes."""
        actions = self.plan.actions
        for index, action in enumerate(actions):
            if not lexically_ok[index]:
                continue
            parts = keys[index].split("/")
            for depth in range(1, len(parts)):
                parent = "/".join(parts[:depth])
                if parent in files:
                    self.add(
                        "ERR_ACTION_CONFLICT",
                        f"path is inside {actions[files[parent]].path!r}, which action "
                        f"{files[parent]} treats as a file",
                        path=action.path,
                        index=index,
                    )
                    break
                if parent in deleted_dirs and action.kind not in _DELETE_KINDS:
                    self.add(
                        "ERR_ACTION_CONFLICT",
                        f"path is inside {actions[deleted_dirs[parent]].path!r}, which action "
                        f"{deleted_dirs[parent]} deletes",
                        path=action.path,
                        index=index,
                    )
                    break

    def _context_requests(self) -> None:
        for j, request in enumerate(self.plan.context_requests):
            problem: str | None = None
            if request.type not in _CONTEXT_TYPES:
                problem = f"unknown context request type {request.type!r}"
            elif request.type == ContextRequestType.READ_FILE:
                problem = self._read_request_problem(request.path)
            elif request.type == ContextRequestType.SEARCH:
                if not (request.query or "").strip():
                    problem = "search needs a query"
                elif request.glob is not None and _UNSAFE_GLOB_CODES.intersection(
                    path_codes(request.glob, self.limits, self.policy)
                ):
                    problem = "search glob leaves the project"
            elif request.type == ContextRequestType.LOGS and not (request.source or "").strip():
                problem = "logs needs a source"
            start, end = request.start_line, request.end_line
            if problem is None and (
                (start is not None and start < 1)
                or (end is not None and end < 1)
                or (start is not None and end is not None and end < start)
            ):
                problem = f"line range {start}..{end} is not 1 <= start <= end"
            if problem is None and request.last_n is not None and request.last_n < 1:
                problem = "last_n must be at least 1"
            if problem is not None:
                self.add(
                    "ERR_CONTEXT_REQUEST_INVALID",
                    problem,
                    path=request.path,
                    context_index=j,
                )

    def _read_request_problem(self, path: str | None) -> str | None:
        if path is None:
            return "read_file needs a path"
        codes = path_codes(path, self.limits, self.policy)
        if codes:
            return f"read_file path is unsafe ({', '.join(codes)})"
        if protected_match(path, self.policy.protected) is not None:
            return "read_file of a protected path"
        return None
