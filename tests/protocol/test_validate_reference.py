"""The fast validation paths agree with the rules as first written, kept here as references.

``validate_plan`` proves most paths clean with one regex, matches protected patterns with
one joined regex per shape, scans a diff's ``+`` lines in place, defers UTF-8 sizes and
checks nested conflicts by sorting. The functions below are the implementations those
replaced, unchanged; the properties check that both give the same violations, codes,
messages and order on generated paths, policies, limits and plans.
"""

from __future__ import annotations

import fnmatch
import os
import re
import unicodedata
from collections.abc import Callable, Collection
from functools import lru_cache
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_plan_paths import CORPUS

from _support import examples
from opsrun.protocol._content import (
    added_elision_line,
    added_lines,
    count_non_printable,
    elision_line,
    is_sha256_hex,
    looks_like_unified_diff,
    utf8,
)
from opsrun.protocol._fscheck import check_tree
from opsrun.protocol._limits import PathPolicy, PlanLimits, Violation
from opsrun.protocol._memory import check_memory_patch
from opsrun.protocol._paths import (
    clean_keys,
    clean_paths,
    collision_key,
    may_be_protected,
    path_codes,
    path_segments,
    protected_match,
    whitelist_file_problem,
)
from opsrun.protocol._plan import (
    CONTENT_KINDS,
    EDIT_KINDS,
    V2_ONLY_KINDS,
    Action,
    ActionKind,
    ContextRequest,
    ContextRequestType,
    Plan,
)
from opsrun.protocol._validate import NO_CHANGES_PREFIX, validate_plan

# --- references: the implementations the fast paths replaced ------------------------------

_COMMENT = r"(?:#|//|/\*+|\*|<!--|--|;|%|\{/\*)"
_DOTS = r"(?:\.{3}|…)"
_WHAT = (
    r"(?:code|file|class|function|module|implementation|methods?|functions?"
    r"|content|logic|imports?|tests?|component|body)"
)
REF_ELISION = re.compile(
    # A comment (or a bare ellipsis) whose text says code was left out:
    #   // ... existing code ...      # rest of file unchanged
    #   <!-- ...remaining content --> /* previous implementation unchanged */
    # Anchored on a literal "\n" (the text gets one prepended) so the engine can
    # skip to line starts; the possessive indent and the look-ahead on the first
    # character reject ordinary code lines at once. Only the words are case-blind.
    rf"\n[ \t]*+(?=[-#/*<;%{{.…])(?i:(?:{_COMMENT}[ \t]*{_DOTS}?|{_DOTS})[ \t]*(?:"
    rf"{_DOTS}?[ \t]*(?:existing|remaining|previous|unchanged|original|same|other)[ \t]+{_WHAT}\b"
    rf"|(?:the[ \t]+)?(?:rest|remainder)[ \t]+of[ \t]+(?:the[ \t]+)?{_WHAT}\b"
    rf"|{_WHAT}[ \t]+(?:unchanged|omitted|elided|truncated|remains?[ \t]+(?:the[ \t]+)?same)\b"
    rf"|(?:omitted|truncated)[ \t]+for[ \t]+brevity\b"
    rf"|(?:everything|all)[ \t]+else[ \t]+(?:unchanged|stays|remains)\b"
    rf"|unchanged[ \t]*{_DOTS}"
    r"))",
)


def ref_elision_line(text: str) -> str | None:
    """Return the first line of ``text`` that elides code with a placeholder, or ``None``.

    Placeholders are comments (or bare ellipses) such as ``// ... existing code ...``
    or ``# rest of file unchanged``; ordinary code and a bare ``...`` are not.
    """
    match = REF_ELISION.search("\n" + text)
    if match is None:
        return None
    start = match.start()  # index of the line in text (the prepended "\n" shifts by one)
    end = text.find("\n", start)
    return text[start : end if end != -1 else len(text)].strip()


_DRIVE = re.compile(r"^[A-Za-z]:")
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"COM{i}" for i in range(1, 10)}
    | {f"LPT{i}" for i in range(1, 10)}
)
_NOT_PORTABLE_CHARS = frozenset('<>:"|?*')
# Windows 8.3 short names that resolve to .git (GIT~1) are refused like .git itself.
_SHORT_GIT = re.compile(r"^git~\d+$", re.IGNORECASE)
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_SEPARATORS = ("/", "\\")
_DOT_SEGMENTS = {
    "..": ("ERR_PATH_TRAVERSAL", "path has a '..' segment"),
    ".": ("ERR_PATH_DOT_SEGMENT", "path has a '.' segment"),
}


def _split(path: str) -> list[str]:
    segments = path.replace("\\", "/").split("/")
    if len(segments) > 1 and segments[-1] == "":
        segments.pop()  # one trailing separator names the same directory
    return segments


def _has_bad_char(path: str) -> bool:
    if path.isascii():
        return any(c < " " or c == "\x7f" for c in path)
    return any(unicodedata.category(c) in _BAD_CATEGORIES for c in path)


def _segment_not_portable(segment: str) -> str | None:
    if segment.endswith((".", " ")):
        return f"segment {segment!r} ends with a dot or space (dropped on Windows)"
    bad = _NOT_PORTABLE_CHARS.intersection(segment)
    if bad:
        return f"segment {segment!r} contains {''.join(sorted(bad))!r} (not allowed on Windows)"
    stem = segment.split(".", 1)[0].rstrip(" ").upper()
    if stem in _WINDOWS_RESERVED:
        return f"segment {segment!r} is a reserved device name on Windows"
    return None


def _lexical(path: str, limits: PlanLimits, reserved_dirs: tuple[str, ...]) -> dict[str, str]:
    """Return ``{code: message}`` for the structural rules (no NFKC step)."""
    found: dict[str, str] = {}
    if path == "":
        found["ERR_PATH_EMPTY"] = "path is empty"
        return found
    if len(path) > limits.max_path_len:
        found["ERR_PATH_TOO_LONG"] = (
            f"path has {len(path)} characters; the limit is {limits.max_path_len}"
        )
    if _has_bad_char(path):
        found["ERR_PATH_INVALID_CHAR"] = "path contains NUL, control or invisible characters"
    unified = path.replace("\\", "/")
    if unified.startswith("//") and len(unified) > 2 and unified[2] != "/":
        found["ERR_PATH_UNC"] = "path is a UNC or device path (//server/share, \\\\server)"
    elif unified.startswith("/"):
        found["ERR_PATH_ABSOLUTE"] = "path is absolute"
    if _DRIVE.match(unified):
        found["ERR_PATH_DRIVE"] = "path starts with a Windows drive (C: or C:\\)"
    segments = _split(path)
    if segments[0].startswith("~"):
        found["ERR_PATH_HOME"] = "path starts with ~ (home directory)"
    start = 1 if unified.startswith("/") else 0
    _segment_rules(segments, start, {d.casefold() for d in reserved_dirs}, found)
    return found


def _segment_rules(
    segments: list[str], start: int, reserved: set[str], found: dict[str, str]
) -> None:
    """Add the per-segment codes to ``found``, keeping the first message of each code."""
    for index, segment in enumerate(segments[start:], start):
        if segment == "":
            if not (index <= 2 and "ERR_PATH_UNC" in found):
                found.setdefault("ERR_PATH_EMPTY_SEGMENT", "path has an empty segment (//)")
            continue
        if segment in _DOT_SEGMENTS:
            code, message = _DOT_SEGMENTS[segment]
            found.setdefault(code, message)
            continue
        if segment.casefold() in reserved or _SHORT_GIT.match(segment):
            found.setdefault("ERR_FORBIDDEN_PATH", f"segment {segment!r} is reserved")
        if index == 0 and "ERR_PATH_DRIVE" in found:
            continue  # "C:" already reported as a drive
        problem = _segment_not_portable(segment)
        if problem is not None:
            found.setdefault("ERR_PATH_NOT_PORTABLE", problem)


def ref_path_codes(path: str, limits: PlanLimits, policy: PathPolicy) -> dict[str, str]:
    """Return ``{code: message}`` for every lexical rule ``path`` breaks (empty when safe).

    Covers ERR_PATH_* codes, ERR_FORBIDDEN_PATH for reserved directories
    (``.git``, ``.opsrun``) and, when the policy's whitelist is on, for names
    outside it. Protected paths depend on the action and are checked elsewhere.
    Never raises.
    """
    found = _lexical(path, limits, policy.reserved_dirs)
    if "ERR_PATH_EMPTY" in found:
        return found
    folded = unicodedata.normalize("NFKC", path)
    if folded != path:
        for code, message in _lexical(folded, limits, policy.reserved_dirs).items():
            found.setdefault(code, f"{message} (after Unicode NFKC normalisation)")
        if sum(folded.count(s) for s in _SEPARATORS) != sum(path.count(s) for s in _SEPARATORS):
            found.setdefault(
                "ERR_PATH_NOT_PORTABLE", "path contains characters that normalise to separators"
            )
    if policy.use_whitelist and not found:
        problem = _whitelist_problem(folded, policy)
        if problem is not None:
            found["ERR_FORBIDDEN_PATH"] = problem
    if policy.forbidden_prefixes and not found:
        lowered = folded.casefold()
        for prefix in policy.forbidden_prefixes:
            if lowered.startswith(prefix.casefold()):
                found["ERR_FORBIDDEN_PATH"] = f"path starts with the forbidden prefix {prefix!r}"
                break
    return found


def _whitelist_problem(path: str, policy: PathPolicy) -> str | None:
    segments = [s.casefold() for s in _split(path)]
    for pattern in policy.whitelist_forbidden:
        if any(_glob(pattern).match(s) for s in segments):
            return f"path matches the forbidden pattern {pattern!r}"
    return None


@lru_cache(maxsize=256)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern.casefold()))


def ref_protected_match(
    path: str, patterns: tuple[str, ...], *, is_dir: bool = False
) -> str | None:
    """Return the protected pattern ``path`` matches, or ``None``.

    Matching is case-insensitive, on the NFKC form, at any depth: plain globs
    (``.env``, ``*.pem``, ``id_rsa*``) match any segment; ``**/name/**`` matches
    anything under a directory called ``name`` (and, for a directory path, the
    directory itself). Never raises.
    """
    segments = [s.casefold() for s in _split(unicodedata.normalize("NFKC", path)) if s]
    if not segments:
        return None
    for pattern in patterns:
        core = pattern.strip("/")
        if core.startswith("**/") and core.endswith("/**"):
            name = _glob(core[3:-3])
            parents = segments if is_dir else segments[:-1]
            if any(name.match(s) for s in parents):
                return pattern
        elif "/" not in core:
            matcher = _glob(core)
            if any(matcher.match(s) for s in segments):
                return pattern
        elif _glob(core).match("/".join(segments)):
            return pattern
    return None


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
_DELETE_KINDS = frozenset({_K.DELETE_FILE, _K.DELETE_DIR})
_DIR_KINDS = frozenset({_K.CREATE_DIR, _K.DELETE_DIR})
_IDEMPOTENT = frozenset({_K.CREATE_DIR, _K.DELETE_DIR, _K.DELETE_FILE})
_UNSAFE_GLOB_CODES = frozenset(
    {"ERR_PATH_ABSOLUTE", "ERR_PATH_UNC", "ERR_PATH_DRIVE", "ERR_PATH_HOME", "ERR_PATH_TRAVERSAL"}
)


def _read_key(path: str) -> str:
    return "/".join(s for s in path_segments(unicodedata.normalize("NFC", path)) if s != ".")


def ref_validate_plan(
    plan: Plan,
    *,
    mode: Mode = "apply",
    root: str | os.PathLike[str] | None = None,
    read_paths: Collection[str] | None = None,
    limits: PlanLimits | None = None,
    policy: PathPolicy | None = None,
) -> list[Violation]:
    """The validator as first written (see the module docstring)."""
    try:
        return _RefRun(
            plan,
            mode,
            None if root is None else os.fspath(root),
            read_paths,
            limits or _DEFAULT_LIMITS,
            policy or _DEFAULT_POLICY,
        ).run()
    except Exception as exc:  # the documented contract is "never raises"
        return [Violation(code="ERR_VALIDATION_INTERNAL", message=f"validation failed: {exc!r}")]


class _RefRun:
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
        self.read = None if read_paths is None else {_read_key(p) for p in read_paths}
        self.limits = limits
        self.policy = policy
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
        lexically_ok: list[bool] = []
        for index, action in enumerate(self.plan.actions):
            ok, size = self._action(index, action)
            lexically_ok.append(ok)
            total += size
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

    def _action(self, index: int, action: Action) -> tuple[bool, int]:
        """Check one action's own rules; return (path is lexically safe, payload bytes)."""
        path = action.path
        kind = action.kind

        def add(code: str, message: str) -> None:
            self.add(code, message, path=path, index=index)

        codes = ref_path_codes(path, self.limits, self.policy)
        for code, message in codes.items():
            add(code, message)
        if self.plan.version == 1 and kind in V2_ONLY_KINDS:
            add("ERR_KIND_NOT_IN_VERSION", f"{kind.value} needs protocol v2")
        allowed = _ALLOWED_FIELDS[kind] if self.plan.version == 2 else frozenset({"content"})
        for name in _OPTIONAL_FIELDS:
            if getattr(action, name) is not None and name not in allowed:
                if self.plan.version == 1 and name == "content":
                    continue
                add("ERR_FIELD_NOT_ALLOWED", f"{kind.value} must not carry {name}")
        self._required_fields(action, add)
        size = self._payload(action, add)
        if kind in EDIT_KINDS or kind in _DELETE_KINDS:
            pattern = ref_protected_match(path, self.policy.protected, is_dir=kind is _K.DELETE_DIR)
            if pattern is not None:
                add("ERR_PROTECTED_PATH", f"{kind.value} of a protected path ({pattern})")
        if kind not in _DIR_KINDS and kind not in _DELETE_KINDS and not codes:
            problem = whitelist_file_problem(path, self.policy)
            if problem is not None:
                add("ERR_FORBIDDEN_PATH", problem)
        if (
            self.mode == "apply"
            and self.read is not None
            and kind in EDIT_KINDS
            and not codes
            and _read_key(path) not in self.read
        ):
            add("ERR_UPDATE_WITHOUT_BASE", f"{kind.value} of a file that was not read in PLAN")
        return not codes, size

    def _required_fields(self, action: Action, add: _Add) -> None:
        kind = action.kind
        if kind in CONTENT_KINDS and action.content is None:
            add("ERR_CONTENT_REQUIRED", f"{kind.value} needs content")
        if kind is _K.PATCH_FILE:
            if action.patch is None:
                add("ERR_CONTENT_REQUIRED", "PATCH_FILE needs patch")
            elif not looks_like_unified_diff(action.patch):
                add("ERR_PATCH_NOT_UNIFIED", "patch has no '@@ -a,b +c,d @@' hunk header")
        if action.base_sha256 is not None and not is_sha256_hex(action.base_sha256):
            add("ERR_BASE_SHA256_INVALID", "base_sha256 must be 64 hexadecimal digits")
        if (
            self.plan.version == 2
            and kind in (_K.PATCH_FILE, _K.REPLACE_RANGE)
            and action.base_sha256 is None
        ):
            add("ERR_BASE_SHA256_REQUIRED", f"{kind.value} needs base_sha256")
        if kind is _K.REPLACE_RANGE:
            start, end = action.start_line, action.end_line
            if start is None or end is None:
                add("ERR_RANGE_INVALID", "REPLACE_RANGE needs start_line and end_line")
            elif start < 1 or end < start:
                add("ERR_RANGE_INVALID", f"line range {start}..{end} is not 1 <= start <= end")

    def _payload(self, action: Action, add: _Add) -> int:
        """Check content / patch text; return its UTF-8 size."""
        text = action.patch if action.kind is _K.PATCH_FILE else action.content
        if text is None or action.kind not in CONTENT_KINDS | {_K.PATCH_FILE}:
            return 0
        data = utf8(text)
        size = len(data)
        if size > self.limits.max_file_bytes:
            add(
                "ERR_FILE_TOO_LARGE",
                f"{size} bytes in one action; the limit is {self.limits.max_file_bytes}",
            )
        if b"\0" in data:
            add("ERR_CONTENT_NUL", "content contains a NUL byte")
        elif size and count_non_printable(data) > size * self.limits.pseudo_binary_ratio:
            add("ERR_PSEUDO_BINARY", "content looks binary (too many control characters)")
        check_elision = self.policy.check_elided_content and (
            action.kind in EDIT_KINDS
            or (action.kind is _K.CREATE_FILE and self.policy.check_elided_in_creates)
        )
        if check_elision:
            scanned = added_lines(text) if action.kind is _K.PATCH_FILE else text
            line = ref_elision_line(scanned)
            if line is not None:
                add("ERR_ELIDED_CONTENT", f"new text elides code with a placeholder: {line[:80]!r}")
        return size

    def _conflicts(self, lexically_ok: list[bool]) -> None:
        files, deleted_dirs = self._same_path_conflicts(lexically_ok)
        self._nested_conflicts(lexically_ok, files, deleted_dirs)

    def _same_path_conflicts(
        self, lexically_ok: list[bool]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Report actions on one path; return the file paths and deleted directories by key."""
        seen: dict[str, tuple[int, Action, str]] = {}
        files: dict[str, int] = {}
        deleted_dirs: dict[str, int] = {}
        for index, action in enumerate(self.plan.actions):
            if not lexically_ok[index]:
                continue
            key = collision_key(action.path)
            spelled = "/".join(path_segments(action.path))
            if key in seen:
                first, other, other_spelled = seen[key]
                if spelled != other_spelled:
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
            seen[key] = (index, action, spelled)
            if action.kind not in _DIR_KINDS:
                files[key] = index
            elif action.kind is _K.DELETE_DIR:
                deleted_dirs[key] = index
        return files, deleted_dirs

    def _nested_conflicts(
        self, lexically_ok: list[bool], files: dict[str, int], deleted_dirs: dict[str, int]
    ) -> None:
        """Report actions inside a path another action writes as a file or deletes."""
        actions = self.plan.actions
        for index, action in enumerate(actions):
            if not lexically_ok[index]:
                continue
            parts = collision_key(action.path).split("/")
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
        known = {t.value for t in ContextRequestType}
        for j, request in enumerate(self.plan.context_requests):
            problem: str | None = None
            if request.type not in known:
                problem = f"unknown context request type {request.type!r}"
            elif request.type == ContextRequestType.READ_FILE:
                problem = self._read_request_problem(request.path)
            elif request.type == ContextRequestType.SEARCH:
                if not (request.query or "").strip():
                    problem = "search needs a query"
                elif request.glob is not None and _UNSAFE_GLOB_CODES.intersection(
                    ref_path_codes(request.glob, self.limits, self.policy)
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
        codes = ref_path_codes(path, self.limits, self.policy)
        if codes:
            return f"read_file path is unsafe ({', '.join(codes)})"
        if ref_protected_match(path, self.policy.protected) is not None:
            return "read_file of a protected path"
        return None


# --- strategies -----------------------------------------------------------------------------

PATH_TOKENS = [
    *"aBz09_-.~: /\\",
    "src",
    "x.py",
    "..",
    "./",
    "//",
    "C:",
    "d:",
    "CON",
    "nul",
    "com1",
    "Lpt9",
    "conin$",
    "COM¹",
    "aux .txt",
    ".git",
    ".GIT",
    ".opsrun",
    "git~1",
    ".env",
    ".Env",
    "secrets",
    "SECRETS",
    "id_rsa",
    "key.pem",
    "x.KEY",
    "a.p12",
    "build",
    "node_modules",
    "ｃ",
    "．",
    "．．",
    "／",
    "＼",
    "‥",
    "\x00",
    "\x1f",
    "\x7f",
    "\t",
    "\n",
    "\u200b",
    "\u2028",
    "\ufeff",
    "é",
    "e\u0301",
    "ß",
    "ſ",
    "\u212a",
    "İ",
    "ﬁ",
    "<",
    "|",
    "*",
    "?",
    '"',
    "𝒂",
    "\ud800",
]
PLAIN_SEGMENTS = [
    "src",
    "a",
    "B",
    "x.py",
    ".github",
    "a.b.c",
    "-x",
    "_",
    "k",
    "con",
    "Aux.txt",
    "lpt1",
    "com0",
    "nul2",
    ".git",
    ".Opsrun",
    "Build",
    "build",
    "id_rsa.pub",
    "secrets",
    "x.pem",
    "a.",
    ".",
    "..",
    "a..b",
    "...",
]
# Mostly the plain ASCII shape the one-pass checks accept, with near misses.
plain_paths = st.tuples(
    st.lists(st.sampled_from(PLAIN_SEGMENTS), min_size=1, max_size=5).map("/".join),
    st.sampled_from(["", "", "", "/", "\n", "//", "\\"]),
).map("".join)
paths = st.one_of(
    plain_paths,
    st.lists(st.sampled_from(PATH_TOKENS), max_size=12).map("".join),
    st.text(max_size=20),
    st.sampled_from(["a", "a/b", "A/B", "a/b/c", "a\\b", "ａ/b", "café", "cafe\u0301", "a/", "b"]),
)
patterns = st.sampled_from(
    [
        PathPolicy().protected,
        (),
        ("**/build/**", "src/*.py", "*.LOCK", "ſecret*", "[!a]*.txt", "a?c", "docs/**"),
        ("/secrets/", "**/**", "**/x/**/", "K*", "ss", "*"),
        ("id_rsa*", "**/Secrets/**", "a/b", ".ENV"),
    ]
)
reserved = st.sampled_from(
    [(".git", ".opsrun"), (), (".git",), ("Build", "ß", "a/b", ".svn", "node_modules", "K", "")]
)
policies = st.builds(
    PathPolicy,
    protected=patterns,
    reserved_dirs=reserved,
    use_whitelist=st.booleans(),
    forbidden_prefixes=st.sampled_from([(), ("build/", "SRC"), ("a",)]),
    check_elided_content=st.booleans(),
    check_elided_in_creates=st.booleans(),
)
limits = st.one_of(
    st.just(PlanLimits()),
    st.builds(
        PlanLimits,
        max_actions=st.integers(0, 6),
        max_path_len=st.integers(1, 30),
        max_total_content_bytes=st.integers(0, 400),
        max_file_bytes=st.integers(0, 120),
        pseudo_binary_ratio=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    ),
)

ELISION_TOKENS = [
    *" \t.+-#*/;%<{x",
    "//",
    "/*",
    "/**",
    "<!--",
    "-->",
    "--",
    "{/*",
    "...",
    "…",
    "existing",
    "EXISTING",
    "Remaining",
    "previous",
    "unchanged",
    "original",
    "same",
    "ſame",
    "other",
    "code",
    "file",
    "class",
    "function",
    "functions",
    "method",
    "methods",
    "module",
    "implementation",
    "content",
    "logic",
    "import",
    "imports",
    "test",
    "tests",
    "component",
    "body",
    "the",
    "rest",
    "remainder",
    "of",
    "omitted",
    "elided",
    "truncated",
    "remain",
    "remains",
    "for",
    "brevity",
    "everything",
    "all",
    "else",
    "stays",
    "\u212aeep",
    "keep",
    "é",
]
LINE_BREAKS = ["\n", "\n", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]
WORDS = [t for t in ELISION_TOKENS if t.isalpha() and len(t) > 1]
blanks = st.sampled_from(["", " ", "\t", "  ", " \t "])
_CASES: list[Callable[[str], str]] = [str.__str__, str.upper, str.title]
words = st.tuples(st.sampled_from(WORDS), st.sampled_from(_CASES)).map(
    lambda pair: pair[1](pair[0])
)
# Shaped like a placeholder comment: indent, marker, dots, then words, each part optional.
placeholder_lines = st.tuples(
    blanks,
    st.sampled_from(["", "#", "//", "/*", "/**", "*", "<!--", "--", ";", "%", "{/*", "-", "x"]),
    blanks,
    st.sampled_from(["", "...", "…", ".."]),
    blanks,
    st.lists(st.tuples(words, blanks).map("".join), max_size=5).map("".join),
    st.sampled_from(["", "...", "…", " -->", "*/", "x", "é"]),
).map("".join)
lines = st.one_of(
    placeholder_lines, st.lists(st.sampled_from(ELISION_TOKENS), max_size=10).map("".join)
)
texts = st.lists(st.tuples(lines, st.sampled_from(LINE_BREAKS)), max_size=6).map(
    lambda parts: "".join(line + end for line, end in parts)
)
CONTENT_TOKENS = ["x", "é", "€", "𝄞", "\ud800", "\x00", "\x01", "\x7f", "\x1b", "\t", "\n"]
contents = st.one_of(
    texts,
    st.lists(st.sampled_from(CONTENT_TOKENS), max_size=40).map("".join),
    st.text(max_size=30),
)
diff_lines = st.tuples(
    st.sampled_from(["+", "-", " ", "+++", "++", "@@ -1,2 +1,3 @@", "--- a/x", ""]), lines
).map("".join)
patches = st.lists(st.tuples(diff_lines, st.sampled_from(LINE_BREAKS)), max_size=8).map(
    lambda parts: "".join(line + end for line, end in parts)
)
actions = st.builds(
    Action,
    kind=st.sampled_from(list(ActionKind)),
    path=paths,
    content=st.none() | contents,
    patch=st.none() | patches,
    base_sha256=st.sampled_from(
        [None, "0" * 64, "A" * 64, "x", "f" * 63, "f" * 65, "g" * 64, "٠" * 64, " " + "a" * 63]
    ),
    start_line=st.none() | st.integers(-1, 4),
    end_line=st.none() | st.integers(-1, 4),
)
context_requests = st.builds(
    ContextRequest,
    type=st.sampled_from(["read_file", "search", "logs", "env", "other"]),
    path=st.none() | paths,
    query=st.none() | st.sampled_from(["", "x"]),
    glob=st.none() | paths,
    source=st.none() | st.just("app"),
    start_line=st.none() | st.integers(-1, 3),
    end_line=st.none() | st.integers(-1, 3),
)
plain_actions = st.builds(
    Action,
    kind=st.sampled_from(list(ActionKind)),
    path=plain_paths,
    content=st.none() | contents,
    patch=st.none() | patches,
)
plans = st.builds(
    Plan,
    version=st.sampled_from([1, 2]),
    actions=st.one_of(st.lists(actions, max_size=8), st.lists(plain_actions, max_size=8)).map(
        tuple
    ),
    summary=st.none() | st.sampled_from(["", "s", "NO_CHANGES: none"]),
    context_requests=st.lists(context_requests, max_size=2).map(tuple),
)


# --- properties -----------------------------------------------------------------------------


@settings(max_examples=examples(1.0))
@given(paths, policies, limits)
def test_path_codes_agree(path: str, policy: PathPolicy, plan_limits: PlanLimits) -> None:
    assert path_codes(path, plan_limits, policy) == ref_path_codes(path, plan_limits, policy)


@settings(max_examples=examples(1.0))
@given(paths, patterns, st.booleans())
def test_protected_match_agrees(path: str, protected: tuple[str, ...], is_dir: bool) -> None:
    assert protected_match(path, protected, is_dir=is_dir) == ref_protected_match(
        path, protected, is_dir=is_dir
    )


@settings(max_examples=examples(1.0))
@given(st.lists(paths, max_size=6), policies, limits)
def test_one_pass_path_facts_agree(
    many: list[str], policy: PathPolicy, plan_limits: PlanLimits
) -> None:
    if clean_paths(many, plan_limits, policy):
        assert all(ref_path_codes(p, plan_limits, policy) == {} for p in many)
        assert clean_keys(many) == [collision_key(p) for p in many]
    if not may_be_protected(many, policy.protected):
        for is_dir in (False, True):
            assert all(
                ref_protected_match(p, policy.protected, is_dir=is_dir) is None for p in many
            )


def test_one_pass_path_facts_see_each_path() -> None:
    policy, plan_limits = PathPolicy(), PlanLimits(max_path_len=5)
    assert clean_paths(["src", "a/b.py", "docs/"], PlanLimits(), policy)
    assert not clean_paths([], plan_limits, policy)
    assert not clean_paths(["a\nCON"], plan_limits, policy)
    assert not clean_paths(["ok", "a\n.git"], plan_limits, policy)
    assert not clean_paths(["ok", "abcdef"], plan_limits, policy)
    assert not clean_paths(["ok", "a"], plan_limits, PathPolicy(forbidden_prefixes=("x",)))
    assert may_be_protected(["ok", "a/.env"], policy.protected)
    assert may_be_protected(["ok", "ａ/x"], policy.protected)
    assert not may_be_protected(["ok", "src/app.py"], policy.protected)


@pytest.mark.parametrize("path", CORPUS)
def test_corpus_paths_agree(path: str) -> None:
    for policy in (PathPolicy(), PathPolicy(use_whitelist=True, reserved_dirs=("Build", "ß"))):
        for plan_limits in (PlanLimits(), PlanLimits(max_path_len=8)):
            assert path_codes(path, plan_limits, policy) == ref_path_codes(
                path, plan_limits, policy
            )
        for is_dir in (False, True):
            assert protected_match(path, policy.protected, is_dir=is_dir) == ref_protected_match(
                path, policy.protected, is_dir=is_dir
            )


@settings(max_examples=examples(1.0))
@given(texts)
def test_elision_line_agrees(text: str) -> None:
    assert elision_line(text) == ref_elision_line(text)


@settings(max_examples=examples(1.0))
@given(patches)
def test_added_elision_line_agrees(patch: str) -> None:
    assert added_elision_line(patch) == ref_elision_line(added_lines(patch))


@settings(max_examples=examples(0.75))
@given(
    plans,
    st.sampled_from(["plan", "apply"]),
    st.none() | st.lists(paths, max_size=3),
    limits,
    policies,
)
def test_validate_plan_agrees(
    plan: Plan,
    mode: Literal["plan", "apply"],
    read_paths: list[str] | None,
    plan_limits: PlanLimits,
    policy: PathPolicy,
) -> None:
    assert validate_plan(
        plan, mode=mode, read_paths=read_paths, limits=plan_limits, policy=policy
    ) == ref_validate_plan(
        plan, mode=mode, read_paths=read_paths, limits=plan_limits, policy=policy
    )


@pytest.mark.parametrize(
    "paths_in_plan",
    [
        ["a", "a/b"],
        ["a/b", "a"],
        ["A", "a/b/c", "a/b"],
        ["a-b", "a.c", "a/x"],
        ["a/b", "a/b/c", "a/bc"],
        ["café/x", "cafe\u0301"],
        ["x/y/z", "x", "x/y"],
    ],
)
def test_nested_conflicts_agree(paths_in_plan: list[str]) -> None:
    for kinds in (
        [ActionKind.CREATE_FILE] * 3,
        [ActionKind.DELETE_DIR, ActionKind.CREATE_FILE, ActionKind.DELETE_FILE],
        [ActionKind.CREATE_DIR, ActionKind.DELETE_DIR, ActionKind.UPDATE_FILE],
    ):
        actions = tuple(
            Action(kind=kind, path=path, content="x\n" if kind in CONTENT_KINDS else None)
            for kind, path in zip(kinds, paths_in_plan, strict=False)
        )
        plan = Plan(version=1, actions=actions, summary="s")
        assert validate_plan(plan) == ref_validate_plan(plan)


def test_content_sizes_agree_at_the_limits() -> None:
    for text in ["é" * 60, "𝄞" * 30, "\ud800" * 40, "x" * 120, "\x01" * 9 + "é" * 50]:
        for size in (len(utf8(text)) - 1, len(utf8(text)), len(text)):
            plan_limits = PlanLimits(max_file_bytes=size, max_total_content_bytes=2 * size)
            plan = Plan(
                version=1,
                actions=(
                    Action(kind=ActionKind.CREATE_FILE, path="a.txt", content=text),
                    Action(kind=ActionKind.CREATE_FILE, path="b.txt", content=text + "x"),
                ),
            )
            assert validate_plan(plan, limits=plan_limits) == ref_validate_plan(
                plan, limits=plan_limits
            )
