"""Exact application of single-file unified diffs, with GNU ``patch -F0`` placement.

The text is first normalised (hunk counts recounted from the bodies, blank context
lines restored, missing file headers supplied) and then parsed by :mod:`unidiff`,
which stays the parser of record. Hunks are placed the way GNU ``patch -F0``
places them: at the stated line plus the offset of the previous hunk when the
whole context matches there, otherwise at the nearest line, searching outward,
where it matches, never before the last line the previous hunk changed. A hunk
with less leading than trailing context may only match at the start of the file,
one with less trailing context only at the end, exactly as GNU ``patch`` does.
There is no fuzz: a hunk matches completely or the whole patch fails.

One deliberate difference from GNU: a hunk that does not match at its stated line
and matches in several other places is refused (``ERR_PATCH_AMBIGUOUS``) instead of
going to the nearest one. Opt-in tolerance levels (``whitespace``, ``loose``) accept
sloppier hunks under the same rule; see :mod:`._patch_place`.

Lines are compared without their line endings; the file keeps its own endings,
its byte order mark and its final newline, and added lines take the file's
dominant ending unless the patch gives one a CRLF of its own.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

from opsrun.errors import PatchError

from ._content import is_sha256_hex
from ._patch_place import Hunk, HunkPlacement, PatchResult, PatchTolerance, Placer, check_tolerance

__all__ = [
    "apply_patch",
    "apply_patch_detailed",
    "check_base_sha256",
    "decode_text",
    "replace_range",
    "sha256_hex",
]

# A ``diff -N`` header dates a file that does not exist to the Epoch (in any time zone).
_STAMP_RE = re.compile(
    r"\t\s*(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.\d+)?(?: ([+-])(\d\d)(\d\d))?\s*$"
)
_GIT_CREATED = re.compile(r"^new file mode 100644\s*$")
_GIT_DELETED = re.compile(r"^deleted file mode 100644\s*$")
_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? ?\+(\d+)(?:,(\d+))? ?@@(.*)$")
_UNNUMBERED_RE = re.compile(r"^@@(?:[^@]*@@(.*))?$")
_NO_NEWLINE = "\\ No newline at end of file"
_MAX_SHOWN = 200
# GNU ``patch`` refuses line numbers past its 64-bit LINENUM ("line number ... is too
# large"); past ~4,300 digits Python's int() would raise a bare ValueError.
_MAX_DIGITS = 18

# Header lines that announce something PATCH_FILE refuses to do (rename, copy,
# mode changes, symlinks, binary content) or a diff format other than unified.
_REFUSED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(?:rename|copy) (?:from|to) "), "rename or copy headers"),
    (re.compile(r"^(?:dis)?similarity index "), "rename or copy headers"),
    (re.compile(r"^(?:old|new) mode "), "file mode changes"),
    (re.compile(r"^(?:new|deleted) file mode (?!100644\s*$)"), "a file mode other than 100644"),
    (re.compile(r"^index \S+ (?:120000|160000)\s*$"), "a symbolic link or submodule"),
    (re.compile(r"^GIT binary patch"), "a binary patch"),
    (re.compile(r"^Binary files? .* (?:differ|has changed)"), "a binary patch"),
    (re.compile(r"^\*{15}"), "a context diff"),
    (re.compile(r"^\*\*\* \S"), "a context diff"),
)


def sha256_hex(data: bytes | str) -> str:
    """Return the lower-case hex sha256 of ``data`` (a ``str`` is hashed as UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def check_base_sha256(data: bytes, base_sha256: str | None, *, path: str = "") -> None:
    """Check that ``data`` hashes to ``base_sha256``; ``None`` skips the check.

    Raises:
        PatchError: ``ERR_BASE_SHA256_INVALID`` when the value is not exactly 64 hex
            digits (either case; a trailing newline is refused),
            ``ERR_BASE_MISMATCH`` when the file changed since the plan was written.
    """
    if base_sha256 is None:
        return
    if not is_sha256_hex(base_sha256):
        raise PatchError(
            f"{path or 'file'}: base_sha256 must be 64 hex digits, got {base_sha256[:80]!r}",
            code="ERR_BASE_SHA256_INVALID",
            details={"path": path, "base_sha256": base_sha256},
        )
    actual = sha256_hex(data)
    if actual != base_sha256.lower():
        raise PatchError(
            f"{path or 'file'} changed since the plan was written: "
            f"base_sha256 {base_sha256.lower()} but the file hashes to {actual}",
            code="ERR_BASE_MISMATCH",
            details={"path": path, "expected": base_sha256.lower(), "actual": actual},
        )


def decode_text(data: bytes | str, *, path: str = "") -> str:
    """Return ``data`` as text, decoding bytes as strict UTF-8.

    Raises:
        PatchError: ``ERR_NON_UTF8_FILE`` when the bytes are not UTF-8.
    """
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError(
            f"{path or 'file'} is not UTF-8 text (byte {exc.start}); "
            "it can only be replaced as a whole",
            code="ERR_NON_UTF8_FILE",
            details={"path": path, "offset": exc.start},
        ) from exc


class _Lines:
    """A text split on ``\\n``: raw lines (a CR kept), comparison keys and its line ending."""

    __slots__ = ("crlf", "final_nl", "keys", "raw")

    def __init__(self, text: str) -> None:
        self.final_nl = text.endswith("\n")
        raw = text.split("\n") if text else []
        if self.final_nl:
            raw.pop()
        self.raw = raw
        if "\r" in text:
            self.keys = [s[:-1] if s.endswith("\r") else s for s in raw]
            terminated = len(raw) if self.final_nl else len(raw) - 1
            with_cr = sum(1 for s in raw[:terminated] if s.endswith("\r"))
            self.crlf = with_cr * 2 > terminated
        else:
            self.keys = raw
            self.crlf = False


def _show(line: str | None) -> str:
    if line is None:
        return "<end of file>"
    return repr(line if len(line) <= _MAX_SHOWN else line[:_MAX_SHOWN] + "…")


def replace_range(
    original: str | bytes, start_line: int, end_line: int, content: str, *, path: str = ""
) -> str:
    """Replace lines ``start_line..end_line`` (1-based, inclusive) with ``content``.

    The new lines take the file's line ending; the file's final-newline state is
    kept when the range reaches the end of the file, and a UTF-8 byte order mark stays
    in front of the first line (as for patches; one in ``content`` is dropped there).

    Raises:
        PatchError: ``ERR_RANGE_INVALID`` when the range is empty, reversed or past
            the end of the file; ``ERR_NON_UTF8_FILE`` for non-UTF-8 bytes.
    """
    text = decode_text(original, path=path)
    if text.startswith("\ufeff"):
        kept = replace_range(text[1:], start_line, end_line, content, path=path)
        return "\ufeff" + kept.removeprefix("\ufeff") if kept else kept
    lines = _Lines(text)
    count = len(lines.raw)
    if not (1 <= start_line <= end_line <= count):
        raise PatchError(
            f"{path or 'file'}: lines {start_line}-{end_line} are not a range of "
            f"this {count}-line file",
            code="ERR_RANGE_INVALID",
            details={"path": path, "start_line": start_line, "end_line": end_line, "lines": count},
        )
    eol = "\r" if lines.crlf else ""
    block = content.split("\n")
    if block[-1] == "":
        block.pop()
    block = [(s[:-1] if s.endswith("\r") else s) + eol for s in block]
    out = lines.raw[: start_line - 1] + block + lines.raw[end_line:]
    if not out:
        return ""
    if not lines.final_nl and eol and out[-1].endswith(eol):
        out[-1] = out[-1][: -len(eol)]
    return "\n".join(out) + ("\n" if lines.final_nl else "")


@dataclass(slots=True)
class _Parsed:
    named: bool  # whether the patch had ``---``/``+++`` headers
    source: str | None  # None for /dev/null
    target: str | None
    hunks: list[Hunk]


def _not_unified(message: str, **details: object) -> PatchError:
    return PatchError(message, code="ERR_PATCH_NOT_UNIFIED", details=details)


def _header_name(value: str) -> str:
    if _dated_epoch(value):
        return "/dev/null"
    name = value.split("\t", 1)[0].rstrip()
    if len(name) >= 2 and name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    return name


def _dated_epoch(value: str) -> bool:
    """Whether a ``---``/``+++`` header's timestamp is the Epoch: GNU's mark of no file."""
    m = _STAMP_RE.search(value)
    if m is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    seconds = ((hour * 60) + minute) * 60 + second
    if (year, month, day) == (1969, 12, 31):
        seconds -= 86_400
    elif (year, month, day) != (1970, 1, 1):
        return False
    if m.group(7) is not None:
        offset = (int(m.group(8)) * 60 + int(m.group(9))) * 60
        seconds -= offset if m.group(7) == "+" else -offset
    return seconds == 0


def _is_file_header(lines: list[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _collect_body(
    lines: list[str], start: int, old_h: int, new_h: int
) -> tuple[list[str], int, int, int]:
    """Return a hunk's normalised body, the index after it, and its old and new counts.

    The body runs until a line that cannot belong to a hunk. When the header's counts
    describe a body that changes something, the header wins if only blank lines are left
    over, or if the lines left over add nothing and stop at text that is no diff (a mail
    signature's ``-- `` and version, prose after the diff): they are text after the hunk.
    Otherwise the counts are recomputed from the body, as ``git apply --recount`` does.
    """
    body: list[str] = []
    old = new = 0
    i = start
    end = len(lines)
    fits: int | None = None  # body length at which the header's counts were exactly met
    while i < end:
        line = lines[i]
        kind = line[:1]
        if kind == " ":
            old += 1
            new += 1
        elif kind == "-":
            if old >= old_h and new >= new_h and _is_file_header(lines, i):
                break
            old += 1
        elif kind == "+":
            new += 1
        elif kind == "" or kind == "\t":
            line = " " + line
            old += 1
            new += 1
        elif kind == "\\":
            if body and not body[-1].startswith("\\"):
                body.append(_NO_NEWLINE)
                if fits == len(body) - 1:
                    fits = len(body)
            i += 1
            continue
        else:
            break
        body.append(line)
        if old == old_h and new == new_h:
            fits = len(body)
        i += 1
    if fits is not None and fits < len(body) and _left_over(lines, i, body, fits):
        old -= len(body) - fits
        new -= len(body) - fits
        del body[fits:]
    return body, i, old, new


def _left_over(lines: list[str], stop: int, body: list[str], fits: int) -> bool:
    """Whether ``body[fits:]`` is not part of a hunk its header's counts end at ``fits``."""
    rest = body[fits:]
    if all(s == " " for s in rest):
        return True
    if not any(s[0] in "+-" for s in body[:fits]) or any(s[0] == "+" for s in rest):
        return False
    after = lines[stop] if stop < len(lines) else None
    return (
        after is not None
        and not after.startswith(("@@", "diff "))
        and not _is_file_header(lines, stop)
    )


def _scan(
    patch: str, *, loose: bool = False
) -> tuple[list[tuple[str, str]], list[str], list[list[str]], str, list[bool]]:
    """Check the patch's shape; return file headers, hunk headers, hunk bodies, normalised
    text, and whether each hunk header states line numbers (only ``loose`` allows none).

    Raises:
        PatchError: ``ERR_PATCH_NOT_UNIFIED`` for anything but one file's unified hunks.
    """
    lines = patch.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if "\r" in patch:
        # A patch whose hunk header ends in CR went through a CRLF transport: every line's
        # CR is its line ending. Otherwise a CR on an added line is part of the line (an
        # explicit CRLF, kept as GNU ``patch`` keeps it); other lines compare without it.
        transport = next((s.endswith("\r") for s in lines if s.startswith("@@")), True)
        lines = [
            s[:-1] if s.endswith("\r") and (transport or not s.startswith("+")) else s
            for s in lines
        ]
    files: list[tuple[str, str]] = []
    git_files = 0
    out: list[str] = []
    headers: list[str] = []
    bodies: list[list[str]] = []
    numbered: list[bool] = []
    created = deleted = False  # git's "new file mode" / "deleted file mode" headers
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            git_files += 1
        elif _GIT_CREATED.match(line):
            created = True
        elif _GIT_DELETED.match(line):
            deleted = True
        elif _is_file_header(lines, i):
            files.append((_header_name(line[4:]), _header_name(lines[i + 1][4:])))
            i += 2
            continue
        elif line.startswith("@@"):
            header, body, i = _scan_hunk(lines, i, len(bodies) + 1, loose=loose)
            numbered.append(_HUNK_RE.match(line) is not None)
            headers.append(line.strip())
            out.append(header)
            out.extend(body)
            bodies.append(body)
            continue
        else:
            _refuse_header(line, i)
        i += 1
    _check_one_file(patch, files, git_files, len(bodies))
    if files and (created or deleted):
        files[0] = (
            "/dev/null" if created else files[0][0],
            "/dev/null" if deleted else files[0][1],
        )
    source, target = files[0] if files else ("a/file", "b/file")
    text = "\n".join([f"--- {source}", f"+++ {target}", *out]) + "\n"
    return files, headers, bodies, text, numbered


def _scan_hunk(
    lines: list[str], i: int, number: int, *, loose: bool = False
) -> tuple[str, list[str], int]:
    """Read the hunk whose ``@@`` header is ``lines[i]``.

    Returns:
        The header with recounted lengths, the normalised body, and the index after it.
    """
    line = lines[i]
    m = _HUNK_RE.match(line)
    if m is None and loose and _UNNUMBERED_RE.match(line.strip()):
        # ``@@``, ``@@ @@`` or ``@@ ... @@ def f():``: a hunk that states no line.
        body, end, old, new = _collect_body(lines, i + 1, 0, 0)
        _check_changes(body, old, new, number, line)
        return f"@@ -1,{old} +1,{new} @@", body, end
    if m is None:
        raise _not_unified(
            f"line {i + 1} is not a unified hunk header "
            f"('@@ -start,count +start,count @@'): {_show(line)}",
            line=i + 1,
            text=line,
        )
    for digits in m.group(1, 2, 3, 4):
        if digits is not None and len(digits) > _MAX_DIGITS:
            raise _not_unified(
                f"line {i + 1}: hunk #{number} states a number of {len(digits)} digits, "
                f"more than any file has lines: {_show(line)}",
                line=i + 1,
                text=line[:_MAX_SHOWN],
            )
    old_h = 1 if m.group(2) is None else int(m.group(2))
    new_h = 1 if m.group(4) is None else int(m.group(4))
    body, end, old, new = _collect_body(lines, i + 1, old_h, new_h)
    _check_changes(body, old, new, number, line)
    return f"@@ -{m.group(1)},{old} +{m.group(3)},{new} @@{m.group(5)}", body, end


def _check_changes(body: list[str], old: int, new: int, number: int, line: str) -> None:
    markers = body.count(_NO_NEWLINE)
    if old + new == 2 * (len(body) - markers):  # only context lines, or none at all
        raise _not_unified(
            f"hunk #{number} ({line.strip()}) changes nothing", hunk=number, header=line
        )


def _refuse_header(line: str, i: int) -> None:
    """Raise when ``line`` announces something PATCH_FILE does not do."""
    for pattern, what in _REFUSED:
        if pattern.match(line):
            raise _not_unified(
                f"line {i + 1}: PATCH_FILE takes plain unified diffs, not {what}: {_show(line)}",
                line=i + 1,
                text=line,
            )


def _check_one_file(patch: str, files: list[tuple[str, str]], git_files: int, hunks: int) -> None:
    """Raise unless the scanned patch names at most one file and has a hunk."""
    if len(files) > 1 or git_files > 1:
        names = sorted({n for pair in files for n in pair})
        raise _not_unified(
            f"the patch names {max(len(files), git_files)} files; PATCH_FILE patches one file",
            files=names,
        )
    if hunks == 0:
        raise _not_unified(
            "no unified hunk ('@@ -start,count +start,count @@' followed by ' ', '-', '+' "
            "lines) found in the patch",
            excerpt=patch[:200],
        )


def _parse(patch: str, *, loose: bool = False, bom: bool = False) -> _Parsed:
    """Parse a patch: unidiff checks the normalised text and gives each hunk's place.

    unidiff runs in its metadata mode (it validates every header and body line and
    the counts, without building a ``Line`` object per line); the line texts are
    taken from the same normalised bodies it has just validated. With ``bom``, a byte
    order mark at the start of a hunk line is dropped (the file's is kept aside).
    """
    files, headers, bodies, text, numbered = _scan(patch, loose=loose)
    try:
        patch_set = PatchSet(text, metadata_only=True)
    except UnidiffParseError as exc:  # pragma: no cover - _scan hands over well-formed text
        raise _not_unified(f"the patch is not a unified diff: {exc}") from exc
    if len(patch_set) != 1 or len(patch_set[0]) != len(bodies):  # pragma: no cover
        raise _not_unified("the patch must hold one file's hunks")
    hunks: list[Hunk] = []
    for number, (uhunk, body) in enumerate(zip(patch_set[0], bodies, strict=True), start=1):
        if _NO_NEWLINE in body:
            ops: list[tuple[str, str, bool]] = []
            for line in body:
                if line[0] != "\\":
                    ops.append((line[0], line[1:], False))
                elif ops:
                    ops[-1] = (ops[-1][0], ops[-1][1], True)
        else:
            ops = [(line[0], line[1:], False) for line in body]
        if bom:
            ops = [(k, t.removeprefix("\ufeff"), n) for k, t, n in ops]
        old = [text for kind, text, _ in ops if kind != "+"]
        prefix = 0
        while ops[prefix][0] == " ":
            prefix += 1
        suffix = 0
        while ops[-1 - suffix][0] == " ":
            suffix += 1
        header = headers[number - 1]
        first = uhunk.source_start + (0 if old else 1)
        at_end = any(lacks_nl for kind, _, lacks_nl in ops if kind != "+")
        hunks.append(
            Hunk(
                number, header, first, old, tuple(ops), prefix, suffix, numbered[number - 1], at_end
            )
        )
    source, target = files[0] if files else ("", "")
    return _Parsed(
        named=bool(files),
        source=None if source == "/dev/null" else source,
        target=None if target == "/dev/null" else target,
        hunks=hunks,
    )


def _name_matches(name: str, path: str) -> bool:
    wanted = path.replace("\\", "/").lstrip("/")
    return name == wanted or (len(name) > 2 and name[1] == "/" and name[2:] == wanted)


def apply_patch(
    original: str | bytes,
    patch: str,
    *,
    path: str | None = None,
    tolerance: PatchTolerance = "exact",
) -> str:
    """Apply a one-file unified diff to ``original`` and return the new text.

    Args:
        original: The file's current text, or its bytes (decoded as strict UTF-8).
        patch: A unified diff for one file; ``---``/``+++`` headers are optional.
        path: When given, the file names in the headers must name this path.
        tolerance: ``"exact"`` (GNU ``patch -F0`` placement), ``"whitespace"`` or
            ``"loose"``; see :func:`apply_patch_detailed`.

    Returns:
        The patched text. Either every hunk applies or nothing is returned.

    Raises:
        PatchError: as :func:`apply_patch_detailed`.
        ConfigError: ``tolerance`` is not a level.
    """
    return _apply(original, patch, path, check_tolerance(tolerance), report=False).text


def apply_patch_detailed(
    original: str | bytes,
    patch: str,
    *,
    path: str | None = None,
    tolerance: PatchTolerance = "exact",
) -> PatchResult:
    """Apply a one-file unified diff and report where each hunk applied.

    A hunk applies at its stated line (shifted by the previous hunk's offset) when
    it matches there under ``tolerance``; otherwise it must match in exactly one
    place it may go. ``"exact"`` compares lines as they are, ``"whitespace"`` also
    ignores trailing whitespace and tabs against spaces in indentation, ``"loose"``
    also re-indented blocks, Unicode punctuation, a wrong or missing context line
    at a hunk's edge and missing ``@@`` line numbers.

    Args:
        original: The file's current text, or its bytes (decoded as strict UTF-8).
        patch: A unified diff for one file; ``---``/``+++`` headers are optional.
        path: When given, the file names in the headers must name this path.
        tolerance: How sloppy a hunk's context may be.

    Returns:
        The patched text and one :class:`HunkPlacement` per hunk.

    Raises:
        PatchError: ``ERR_PATCH_NOT_UNIFIED`` when the patch is not one file's unified
            hunks (prose, ed scripts, context diffs, binary, rename or mode headers,
            several files, another file's name); ``ERR_PATCH_AMBIGUOUS`` when a hunk
            does not match at its stated line and matches in several places (the
            candidates are in ``details``); ``ERR_PATCH_APPLY_FAILED`` when a hunk's
            context matches nowhere it may go (the closest region is in ``details``);
            ``ERR_NON_UTF8_FILE`` when ``original`` is bytes that are not UTF-8.
        ConfigError: ``tolerance`` is not a level.
    """
    return _apply(original, patch, path, check_tolerance(tolerance), report=True)


def _apply(
    original: str | bytes, patch: str, path: str | None, level: PatchTolerance, *, report: bool
) -> PatchResult:
    label = path or ""
    text = decode_text(original, path=label)
    bom = text.startswith("\ufeff")
    if bom:
        text = text[1:]
    parsed = _parse(patch.removeprefix("\ufeff"), loose=level == "loose", bom=bom)
    _check_target(parsed, text, path)
    output = _Output(_Lines(text))
    placer = Placer(output.source.keys, level, label, report=report)
    placements: list[HunkPlacement] = []
    in_offset = 0
    for hunk in parsed.hunks:
        placed, where, placement = placer.place(hunk, in_offset, output.copied)
        if where + placed.prefix - 1 < output.copied:
            raise placer.failure(hunk, where, "it overlaps the previous hunk")
        if hunk.numbered:
            in_offset = where - placed.first
        output.apply(placed, where)
        if placement is not None:
            placements.append(placement)
    output.copy_to(len(output.source.raw) + 1)
    if parsed.target is None and output.lines:
        raise PatchError(
            f"{label or 'the file'}: the patch deletes the file's whole text "
            "(+++ /dev/null, a new side dated 1970-01-01 00:00:00 UTC or 'deleted file mode') "
            f"but {len(output.lines)} lines would remain",
            code="ERR_PATCH_APPLY_FAILED",
            details={"path": label, "remaining": len(output.lines)},
        )
    new = output.text()
    return PatchResult.model_construct(
        text="\ufeff" + new if bom and new else new, hunks=tuple(placements)
    )


def _check_target(parsed: _Parsed, text: str, path: str | None) -> None:
    """Raise when the headers name another file, or create a file that has content."""
    if path is not None and parsed.named:
        for name in (parsed.source, parsed.target):
            if name is not None and not _name_matches(name, path):
                raise _not_unified(
                    f"the patch is for {name!r}, not {path!r}", path=path, named=name
                )
    if parsed.source is None and text:
        label = path or ""
        raise PatchError(
            f"{label or 'the file'}: the patch creates the file (--- /dev/null, an old side "
            "dated 1970-01-01 00:00:00 UTC or 'new file mode') but it already has content",
            code="ERR_PATCH_APPLY_FAILED",
            details={"path": label},
        )


class _Output:
    """The patched text being built from the input's lines and the hunks' operations."""

    __slots__ = ("copied", "eol", "lines", "no_newline", "source")

    def __init__(self, source: _Lines) -> None:
        self.source = source
        self.eol = "\r" if source.crlf else ""
        self.lines: list[str] = []
        self.no_newline: list[int] = []  # indices in ``lines`` of lines that lack a newline
        self.copied = 0  # input lines consumed so far (GNU's last_frozen_line)

    def copy_to(self, pos: int) -> None:
        """Copy the input lines before line ``pos`` (1-based) that are not copied yet."""
        raw = self.source.raw
        count = len(raw)
        upto = min(pos - 1, count)
        if upto > self.copied:
            if upto == count and not self.source.final_nl:
                self.no_newline.append(len(self.lines) + upto - self.copied - 1)
            self.lines.extend(raw[self.copied : upto])
        self.copied = max(self.copied, pos - 1)

    def apply(self, hunk: Hunk, where: int) -> None:
        """Apply ``hunk``'s operations with its first line at input line ``where``."""
        pos = where  # the input line the next operation refers to
        for kind, value, lacks_nl in hunk.ops:
            if kind == " ":
                pos += 1
                continue
            self.copy_to(pos)
            if kind == "-":
                self.copied = pos
                pos += 1
            elif lacks_nl:
                self.no_newline.append(len(self.lines))
                self.lines.append(value)
            elif value.endswith("\r"):  # an explicit CRLF in the patch
                self.lines.append(value)
            else:
                self.lines.append(value + self.eol)

    def text(self) -> str:
        """Join the lines, giving each its line ending and the file its final newline."""
        out = self.lines
        if not out:
            return ""
        final_nl = True
        for index in self.no_newline:
            if index == len(out) - 1:
                final_nl = False
            elif self.eol and not out[index].endswith(self.eol):
                out[index] += self.eol
        return "\n".join(out) + ("\n" if final_nl else "")
