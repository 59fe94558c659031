"""Path safety: an adversarial corpus, and agreement with an independent reference check."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsrun.protocol import Action, ActionKind, Plan, validate_plan

TRAVERSAL = [
    "..",
    "../x",
    "a/../b",
    "a/..",
    "..\\x",
    "a\\..\\b",
    "../../../../etc/passwd",
    "a/b/../../..",
    "..//x",
    "./../x",
    "a/..\\b",
    "..\\/x",
    "．．/x",
    "‥/x",
    "a/‥",
    "\uff0e\uff0e\uff0fetc",
    "\ufe52\ufe52/x",
    "\u2024\u2024/x",
    "x/．．/y",
    "..\\..\\x",
]
ABSOLUTE = ["/", "/etc/passwd", "//", "///x", "\\", "\\x", "/./x", "／etc/passwd", "/x/"]
DRIVE = ["C:", "C:\\", "C:/", "c:foo", "Z:\\x\\y", "C:..\\x", "ｃ：/x", "d:"]
UNC = [
    "//server/share",
    "\\\\server\\share",
    "\\\\?\\C:\\x",
    "\\\\.\\PhysicalDrive0",
    "//?/C:/x",
    "/\\server\\x",
    "\\/server",
    "//./pipe/x",
]
HOME = ["~", "~/x", "~root/.ssh", "~\\x", "~user"]
DOT = [".", "./", "./x", "x/.", "x/./y", ".\\x", "a/./"]
EMPTY = ["", "a//b", "a\\\\b", "a//"]
CONTROL = [
    "a\x00b",
    "a\nb",
    "a\rb",
    "a\tb",
    "\x7f",
    "a\u0085b",
    "a\u200bb",
    "a\u202eb",
    "a\ufeffb",
    "a\u2028b",
    "x\x1b[31m",
    "a\u2066b",
]
WINDOWS = [
    "CON",
    "con.txt",
    "NUL",
    "nul.tar.gz",
    "AUX",
    "PRN",
    "COM1",
    "com9.log",
    "LPT1",
    "lpt5.txt",
    "dir/CON",
    "CONIN$",
    "a.",
    "a ",
    "dir./x",
    "x/ y ",
    "a:b",
    "file.txt::$DATA",
    "a<b",
    "a>b",
    'a"b',
    "a|b",
    "a?b",
    "a*b",
    "COM¹",
    "aux .txt",
    "a\uff0fb",
]
FORBIDDEN = [
    ".git",
    ".git/config",
    ".git/",
    "a/.git/hooks/pre-commit",
    ".opsrun/journal",
    "x/.opsrun",
    "GIT~1/config",
    "．git/config",
]
PROTECTED = [
    ".env",
    "a/.env",
    "deep/x/.env",
    "key.pem",
    "a/b/c.key",
    "cert.p12",
    "id_rsa",
    "id_rsa.pub",
    ".ssh/id_rsa_old",
    "secrets/x",
    "a/secrets/b",
    "a/secrets/b/c.txt",
    "．env",
]
LONG = ["a" * 241, "a/" * 121 + "b", "é" * 241]


def _case_variants(path: str) -> list[str]:
    return [path, path.upper(), path.title(), path.swapcase()]


def _corpus() -> list[str]:
    prefixable = TRAVERSAL + DOT + CONTROL + WINDOWS + FORBIDDEN + PROTECTED
    paths = ABSOLUTE + DRIVE + UNC + HOME + EMPTY + LONG + prefixable
    paths += ["src/" + p for p in prefixable]
    paths += [p.replace("/", "\\") for p in prefixable]
    for p in FORBIDDEN + PROTECTED + WINDOWS:
        paths += _case_variants(p)
    return list(dict.fromkeys(paths))


CORPUS = _corpus()


def _blocking(path: str, kind: ActionKind) -> list[str]:
    content = "x\n" if kind is ActionKind.UPDATE_FILE else None
    plan = Plan(version=1, actions=(Action(kind=kind, path=path, content=content),), summary="s")
    return [v.code for v in validate_plan(plan) if v.blocking]


def test_corpus_is_large() -> None:
    assert len(CORPUS) >= 200


@pytest.mark.parametrize("path", CORPUS)
def test_adversarial_path_is_refused(path: str) -> None:
    for kind in (ActionKind.DELETE_FILE, ActionKind.UPDATE_FILE):
        codes = _blocking(path, kind)
        assert codes, (path, kind)
        assert "ERR_VALIDATION_INTERNAL" not in codes


@pytest.mark.parametrize(
    "path", ["README.md", "src/app.py", "src/", "a/b/c.txt", "café/naïve.md", "docs/.gitignore"]
)
def test_ordinary_paths_are_accepted(path: str) -> None:
    assert _blocking(path, ActionKind.DELETE_FILE) == []


# An independent statement of the rules, for generated paths.
RESERVED = {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"} | {
    f"{p}{i}" for p in ("COM", "LPT") for i in range(1, 10)
}


def reference_accepts(path: str) -> bool:
    if not path or len(path) > 240:
        return False
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return False
    folded = unicodedata.normalize("NFKC", path)
    if "／" in path or len(folded) > 240:
        return False
    unified = folded.replace("\\", "/")
    if unified.startswith("/") or re.match(r"[A-Za-z]:", unified):
        return False
    segments = unified.split("/")
    if len(segments) > 1 and segments[-1] == "":
        segments.pop()
    if segments[0].startswith("~"):
        return False
    for index, seg in enumerate(segments):
        low = seg.casefold()
        if seg in ("", ".", "..") or seg.endswith((".", " ")):
            return False
        if set(seg) & set('<>:"|?*'):
            return False
        if seg.split(".")[0].rstrip(" ").upper() in RESERVED:
            return False
        if low in (".git", ".opsrun") or re.fullmatch(r"git~\d+", low):
            return False
        if low == ".env" or low.endswith((".pem", ".key", ".p12")) or low.startswith("id_rsa"):
            return False
        if low == "secrets" and index < len(segments) - 1:
            return False
    return True


TOKENS = [
    "a",
    "B",
    "x.py",
    "/",
    "\\",
    ".",
    "..",
    "~",
    ":",
    " ",
    "CON",
    "nul",
    ".git",
    ".env",
    "secrets",
    "id_rsa",
    ".pem",
    "ｃ",
    "．",
    "／",
    "\x00",
    "é",
    "e\u0301",
    "-",
    "_",
    "‥",
]


@given(st.lists(st.sampled_from(TOKENS), max_size=10).map("".join))
def test_validator_agrees_with_reference(path: str) -> None:
    assert (_blocking(path, ActionKind.DELETE_FILE) == []) == reference_accepts(path), path


@given(st.text(max_size=40))
def test_arbitrary_path_strings_never_break_validation(path: str) -> None:
    codes = _blocking(path, ActionKind.DELETE_FILE)
    assert "ERR_VALIDATION_INTERNAL" not in codes
