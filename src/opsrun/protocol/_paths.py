"""Lexical path rules: a plan's paths must be safe on every OS, checked anywhere.

The rules are applied to the path as written and again to its NFKC form, so
look-alikes that some file systems or tools fold (fullwidth ``．．``, ``／``,
``‥``, superscript digits in ``COM¹``) cannot smuggle a traversal, a separator
or a reserved name past the check. Backslashes are separators everywhere.

One trailing ``/`` is tolerated (``src/`` names the directory ``src``); empty
segments elsewhere are refused.
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache

from ._limits import PathPolicy, PlanLimits

__all__ = ["collision_key", "path_codes", "path_segments", "protected_match"]

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


def path_segments(path: str) -> list[str]:
    """Return a relative path's segments (``\\`` separates too; a trailing ``/`` is dropped)."""
    return _split(path)


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


# A segment made of ASCII letters, digits, "_", "-" and dots, neither "." nor ".." nor
# ending with a dot, breaks none of the segment rules unless it is a Windows device name.
# Paths are matched as lines (each followed by "\n"), alone or many at once.
_PLAIN_SEGMENT = r"\.?[A-Za-z0-9_\-][A-Za-z0-9_.\-]*+(?<!\.)"
_DEVICE_NAME = r"(?:CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])(?:\.|/|\n)"


@lru_cache(maxsize=64)
def _clean_lines(reserved_dirs: tuple[str, ...]) -> Callable[[str], object]:
    """A matcher for lines of paths that provably break no lexical rule.

    Such a path is ASCII (so its NFKC form is itself), relative, without drive, home,
    empty, dot, reserved or non-portable segments, and no segment is a reserved
    directory (compared case-insensitively, like ``casefold`` on ASCII). The matcher
    takes paths each followed by ``"\n"`` and returns ``None`` unless all are such.
    """
    names = sorted({d.casefold() for d in reserved_dirs} - {""})  # "" names no segment
    refused = "|".join([_DEVICE_NAME, *(rf"{re.escape(n)}(?:/|\n)" for n in names)])
    # Only a segment starting like a device name or a reserved directory is looked at twice.
    starts = "".join(sorted({"c", "p", "a", "n", "l", *(n[0] for n in names)}))
    segment = rf"(?i:(?![{re.escape(starts)}])|(?!{refused})){_PLAIN_SEGMENT}"
    return re.compile(rf"(?:{segment}(?:/{segment})*/?\n)*", re.ASCII).fullmatch


def _all_clean(paths: Sequence[str], limits: PlanLimits, reserved_dirs: tuple[str, ...]) -> bool:
    lines = "\n".join(paths) + "\n"
    return (
        lines.count("\n") == len(paths)  # no path holds a line break of its own
        and max(map(len, paths)) <= limits.max_path_len
        and _clean_lines(reserved_dirs)(lines) is not None
    )


def clean_paths(paths: Sequence[str], limits: PlanLimits, policy: PathPolicy) -> bool:
    """Whether ``path_codes`` is provably empty for every one of ``paths``, in one pass.

    ``False`` says nothing: ask :func:`path_codes` for each path. Paths outside the
    plain ASCII shape, and every path when the whitelist or forbidden prefixes are on,
    get ``False``.
    """
    if not paths or policy.use_whitelist or policy.forbidden_prefixes:
        return False
    return _all_clean(paths, limits, policy.reserved_dirs)


def clean_keys(paths: Sequence[str]) -> list[str]:
    """``[collision_key(p) for p in paths]`` for paths :func:`clean_paths` accepted."""
    # ASCII, no "\\", at most one trailing "/" and no "\n": drop that "/", lower-case.
    return ("\n".join(paths) + "\n").replace("/\n", "\n").lower().split("\n")[:-1]


def path_codes(path: str, limits: PlanLimits, policy: PathPolicy) -> dict[str, str]:
    """Return ``{code: message}`` for every lexical rule ``path`` breaks (empty when safe).

    Covers ERR_PATH_* codes, ERR_FORBIDDEN_PATH for reserved directories
    (``.git``, ``.opsrun``) and, when the policy's whitelist is on, for names
    outside it. Protected paths depend on the action and are checked elsewhere.
    Never raises.
    """
    if _all_clean((path,), limits, policy.reserved_dirs):
        if not (policy.use_whitelist or policy.forbidden_prefixes):
            return {}
        found: dict[str, str] = {}
        folded = path  # ASCII: already in NFKC form
    else:
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


def whitelist_file_problem(path: str, policy: PathPolicy) -> str | None:
    """Return why a file path written by a plan is outside the whitelist, or ``None``."""
    if not policy.use_whitelist:
        return None
    name = _split(unicodedata.normalize("NFKC", path))[-1].casefold()
    if name in {n.casefold() for n in policy.allowed_no_extension}:
        return None
    if any(name.endswith(ext.casefold()) for ext in policy.allowed_extensions):
        return None
    return f"file name {name!r} has no whitelisted extension"


@lru_cache(maxsize=256)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern.casefold()))


_Matcher = Callable[[str], object]


def _any_of(globs: list[str]) -> _Matcher | None:
    """One matcher for several globs: it matches where any of them matches."""
    if not globs:
        return None
    return re.compile("|".join(f"(?:{_glob(g).pattern})" for g in globs)).match


def _required_literal(glob: str) -> str | None:
    """Text every name matching ``glob`` contains (its longest run without wildcards),
    or ``None`` when there is none to rely on (sets in brackets, or only wildcards)."""
    if "[" in glob or "]" in glob:
        return None
    return max(re.split(r"[*?]", glob.casefold()), key=len) or None


@lru_cache(maxsize=64)
def _protected_matchers(
    patterns: tuple[str, ...],
) -> tuple[tuple[str, ...] | None, _Matcher | None, _Matcher | None, _Matcher | None]:
    """For a tuple of protected patterns: texts a lower-cased ASCII path must contain
    for a segment or parent pattern to match it (``None``: no such filter), and matchers
    for segments, parent directories and whole paths, each joining the patterns of its
    shape, so whether any pattern matches takes one pass per segment."""
    segment: list[str] = []
    parent: list[str] = []
    whole: list[str] = []
    for pattern in patterns:
        core = pattern.strip("/")
        if core.startswith("**/") and core.endswith("/**"):
            parent.append(core[3:-3])
        elif "/" not in core:
            segment.append(core)
        else:
            whole.append(core)
    literals = [_required_literal(glob) for glob in segment + parent]
    needles = None if None in literals else tuple(lit for lit in literals if lit is not None)
    return needles, _any_of(segment), _any_of(parent), _any_of(whole)


def may_be_protected(paths: Sequence[str], patterns: tuple[str, ...]) -> bool:
    """Whether :func:`protected_match` could find a pattern for any of ``paths``.

    ``False`` is certain, for files and directories alike; ``True`` says: ask it.
    """
    if not paths:
        return False
    needles, _, _, in_whole = _protected_matchers(patterns)
    if in_whole is not None or needles is None:
        return True
    joined = "\n".join(paths)
    if not joined.isascii():
        return True
    lowered = joined.lower()  # as protected_match lowers each ASCII path
    return any(needle in lowered for needle in needles)


def protected_match(path: str, patterns: tuple[str, ...], *, is_dir: bool = False) -> str | None:
    """Return the protected pattern ``path`` matches, or ``None``.

    Matching is case-insensitive, on the NFKC form, at any depth: plain globs
    (``.env``, ``*.pem``, ``id_rsa*``) match any segment; ``**/name/**`` matches
    anything under a directory called ``name`` (and, for a directory path, the
    directory itself). Never raises.
    """
    if not may_be_protected((path,), patterns):
        return None
    if path.isascii():  # NFKC keeps ASCII as it is, and casefold is lower
        segments = [s for s in path.lower().replace("\\", "/").split("/") if s]
    else:
        segments = [s.casefold() for s in _split(unicodedata.normalize("NFKC", path)) if s]
    if not segments:
        return None
    _, in_segment, in_parent, in_whole = _protected_matchers(patterns)
    if not (
        (in_segment is not None and any(map(in_segment, segments)))
        or (in_parent is not None and any(map(in_parent, segments if is_dir else segments[:-1])))
        or (in_whole is not None and in_whole("/".join(segments)))
    ):
        return None
    return _first_protected(segments, patterns, is_dir=is_dir)


def _first_protected(segments: list[str], patterns: tuple[str, ...], *, is_dir: bool) -> str | None:
    """The first of ``patterns``, in the policy's order, that the segments match."""
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


def collision_key(path: str) -> str:
    """Return the key under which two paths name the same file on some OS.

    NFC normalisation and case folding, with ``\\`` as ``/`` and no trailing ``/``.
    """
    unified = path.replace("\\", "/")
    if unified.endswith("/"):
        unified = unified[:-1]  # what dropping _split's one trailing empty segment leaves
    if unified.isascii():  # NFC keeps ASCII as it is, and casefold is lower
        return unified.lower()
    return unicodedata.normalize("NFC", unified).casefold()
