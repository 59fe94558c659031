"""Content rules: size, NUL, pseudo-binary text, elision placeholders, diff shape, hashes.

Every check here is linear in the text and works on bytes where it can
(``bytes.translate`` to count non-printable bytes, ``in`` for NUL), so a plan
carrying megabytes of content validates in a small multiple of ``json.loads``.
"""

from __future__ import annotations

import re

__all__ = [
    "added_elision_line",
    "added_lines",
    "count_non_printable",
    "elision_line",
    "is_sha256_hex",
    "looks_like_unified_diff",
    "utf8",
]

# Bytes counted as printable: TAB, LF, CR, ASCII 0x20–0x7E and every byte ≥ 0x80
# (UTF-8 sequences of non-ASCII characters). What is left are C0 controls and DEL.
_PRINTABLE = bytes([9, 10, 13, *range(0x20, 0x7F), *range(0x80, 0x100)])
_HEX_DIGITS = "0123456789abcdefABCDEF"
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.MULTILINE)

_COMMENT = r"(?:#|//|/\*+|\*|<!--|--|;|%|\{/\*)"
_DOTS = r"(?:\.{3}|…)"
_WHAT = (
    r"(?:code|file|class|function|module|implementation|methods?|functions?"
    r"|content|logic|imports?|tests?|component|body)"
)
_ELISION_LINE = (
    # A comment (or a bare ellipsis) whose text says code was left out:
    #   // ... existing code ...      # rest of file unchanged
    #   <!-- ...remaining content --> /* previous implementation unchanged */
    # Matched from a line's start, after its "\n" (the text gets one prepended) so
    # the engine can skip to line starts; the possessive indent and the look-ahead on
    # the first character reject ordinary code lines at once, and the look-ahead on
    # the first letter of the words ordinary comments. The blanks are possessive as
    # nothing after them starts with a blank. Only the words are case-blind. Nothing
    # in it matches a line break: a match stays on its line.
    rf"[ \t]*+(?=[-#/*<;%{{.…])(?i:(?:{_COMMENT}[ \t]*+{_DOTS}?|{_DOTS})[ \t]*+"
    rf"(?=[.…erpuostcfmilba])(?:"
    rf"{_DOTS}?[ \t]*+(?:existing|remaining|previous|unchanged|original|same|other)[ \t]+{_WHAT}\b"
    rf"|(?:the[ \t]+)?(?:rest|remainder)[ \t]+of[ \t]+(?:the[ \t]+)?{_WHAT}\b"
    rf"|{_WHAT}[ \t]+(?:unchanged|omitted|elided|truncated|remains?[ \t]+(?:the[ \t]+)?same)\b"
    rf"|(?:omitted|truncated)[ \t]+for[ \t]+brevity\b"
    rf"|(?:everything|all)[ \t]+else[ \t]+(?:unchanged|stays|remains)\b"
    rf"|unchanged[ \t]*{_DOTS}"
    r"))"
)
# The context diet's own marker, "...[TRUNCATED 1234 chars]...": a text holding it was
# copied from a cut FILE block, so lines the model never saw are missing.
_TRUNCATION_LINE = r"[ \t]*+\.\.\.\[TRUNCATED[ \t]++\d++[ \t]++chars\]\.\.\."
_ELISION = re.compile(r"\n(?:" + _TRUNCATION_LINE + "|" + _ELISION_LINE + ")")
# The same, on the "+" lines of a unified diff ("+++" headers excluded), read in place.
_ADDED_ELISION = re.compile(r"\n\+(?!\+\+)(?:" + _TRUNCATION_LINE + "|" + _ELISION_LINE + ")")


def utf8(text: str) -> bytes:
    """Return the UTF-8 bytes of ``text`` (lone surrogates pass through instead of raising)."""
    return text.encode("utf-8", "surrogatepass")


def count_non_printable(data: bytes) -> int:
    """Return how many bytes of ``data`` are C0 controls (except TAB, LF, CR) or DEL."""
    return len(data.translate(None, _PRINTABLE))


def elision_line(text: str) -> str | None:
    """Return the first line of ``text`` that elides code with a placeholder, or ``None``.

    Placeholders are comments (or bare ellipses) such as ``// ... existing code ...``
    or ``# rest of file unchanged``, and the context diet's ``...[TRUNCATED N chars]...``
    marker; ordinary code and a bare ``...`` are not.
    """
    match = _ELISION.search("\n" + text)
    if match is None:
        return None
    start = match.start()  # index of the line in text (the prepended "\n" shifts by one)
    end = text.find("\n", start)
    return text[start : end if end != -1 else len(text)].strip()


def added_lines(patch: str) -> str:
    """Return the ``+`` lines of a unified diff, without the ``+``, one per line."""
    return "\n".join(
        line[1:]
        for line in patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    )


def added_elision_line(patch: str) -> str | None:
    """Return ``elision_line(added_lines(patch))``: the first ``+`` line that elides code.

    Scans the diff in place when ``"\\n"`` is its only kind of line break (then its
    ``+`` lines are exactly those ``added_lines`` joins), without building their text;
    a diff holding another line break of ``str.splitlines`` is split the slow way.
    """
    if (
        "\r" in patch
        or "\x0b" in patch
        or "\x0c" in patch
        or "\x1c" in patch
        or "\x1d" in patch
        or "\x1e" in patch
        or (not patch.isascii() and ("\x85" in patch or "\u2028" in patch or "\u2029" in patch))
    ):
        return elision_line(added_lines(patch))
    match = _ADDED_ELISION.search("\n" + patch)
    if match is None:
        return None
    start = match.start() + 1  # after the "+" (the prepended "\n" shifts by one)
    end = patch.find("\n", start)
    return patch[start : end if end != -1 else len(patch)].strip()


def looks_like_unified_diff(patch: str) -> bool:
    """Whether ``patch`` has at least one ``@@ -a,b +c,d @@`` hunk header (syntax only)."""
    return _HUNK.search(patch) is not None


def is_sha256_hex(value: str) -> bool:
    """Whether ``value`` is exactly 64 hexadecimal digits (either case)."""
    return len(value) == 64 and not value.strip(_HEX_DIGITS)
