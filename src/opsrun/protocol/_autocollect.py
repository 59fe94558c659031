"""Context gathered before the first model call, from the user's message and any report.

- A traceback or stack trace (Python's ``File "x.py", line 12``, and ``path:line`` or
  ``path:line:col`` as most tools print) names files and lines: each file of the project
  is read from 80 lines before its first named line to 80 after its last.
- An ``ImportError`` / ``ModuleNotFoundError`` / "cannot find module" adds ENV and the
  dependency manifests present: ``pyproject.toml``, ``requirements.txt``,
  ``package.json``, ``poetry.lock``.

Paths outside the project (the standard library, site-packages) are ignored.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["WINDOW", "AutoRequest", "collect"]

WINDOW = 80
"""Lines read before and after a line named in a traceback."""

MANIFESTS = ("pyproject.toml", "requirements.txt", "package.json", "poetry.lock")

_PYTHON_FRAME = re.compile(r'File "(?P<path>[^"\n]+)", line (?P<line>\d+)')
_PATH_LINE = re.compile(
    r"(?<![\w/.\\-])(?P<path>(?:[A-Za-z]:)?[\w./\\-]*[\w-]\.[A-Za-z]\w{0,7}):(?P<line>\d+)(?::\d+)?"
)
_IMPORT_ERROR = re.compile(
    r"\b(?:ImportError|ModuleNotFoundError)\b|cannot find module|no module named",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class AutoRequest:
    """A file (or lines of it) to read before the first call.

    Attributes:
        path: Relative to the root.
        start_line: First line, or None for the whole file.
        end_line: Last line, or None.
        priority: 0 for files a traceback names, 1 for manifests.
    """

    path: str
    start_line: int | None = None
    end_line: int | None = None
    priority: int = 0


def _relative(raw: str, root: Path) -> str | None:
    """``raw`` as a path relative to ``root``, or None when it is outside the project."""
    text = raw.strip().replace("\\", "/")
    candidate = Path(text)
    if candidate.is_absolute():
        try:
            resolved_root = root.resolve()
            text = candidate.resolve().relative_to(resolved_root).as_posix()
        except (OSError, ValueError):
            return None
    parts = PurePosixPath(text).parts
    if not parts or ".." in parts or parts[0] in ("/", "~"):
        return None
    relative = PurePosixPath(*[p for p in parts if p != "."]).as_posix()
    if not (root / relative).is_file():
        return None
    return relative


def collect(text: str, root: str | os.PathLike[str]) -> tuple[list[AutoRequest], bool]:
    """What to read for ``text`` (a message, a report); and whether ENV is wanted."""
    base = Path(root)
    lines: dict[str, list[int]] = {}
    for pattern in (_PYTHON_FRAME, _PATH_LINE):
        for match in pattern.finditer(text):
            path = _relative(match.group("path"), base)
            if path is not None:
                lines.setdefault(path, []).append(int(match.group("line")))
    requests = [
        AutoRequest(path, max(1, min(found) - WINDOW), max(found) + WINDOW)
        for path, found in lines.items()
    ]
    wants_env = _IMPORT_ERROR.search(text) is not None
    if wants_env:
        requests += [
            AutoRequest(name, priority=1)
            for name in MANIFESTS
            if name not in lines and (base / name).is_file()
        ]
    return requests, wants_env
