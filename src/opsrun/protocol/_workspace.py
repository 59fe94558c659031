"""Reading project files into the model's context, under the same rules as the plan.

A read never leaves the root, never follows a link and never opens a protected file
(``.env``, keys, ``secrets/``, ``.git``, ``.opsrun``): such a request becomes a
``REFUSED[...]`` line in the context, never the content. A file block's sha256 is always
of the whole file, also when only some lines are shown: it is what the model copies into
``base_sha256``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from opsrun.errors import OpsrunError

from ._fs import FileSystem, Tree
from ._limits import PathPolicy, PlanLimits
from ._paths import path_codes, protected_match

__all__ = ["ContextBlock", "FileBlock", "Refusal", "read_file_block", "render_context"]


@dataclass(frozen=True, slots=True)
class FileBlock:
    """A file shown to the model.

    Attributes:
        path: The path as requested (relative to the root).
        sha256: Hex sha256 of the whole file.
        size: The file's size in bytes.
        text: The lines shown, or None when the file is not UTF-8.
        start_line: First line shown (1-based), when a range was asked for.
        end_line: Last line shown, when a range was asked for.
    """

    path: str
    sha256: str
    size: int
    text: str | None
    start_line: int | None = None
    end_line: int | None = None

    def render(self) -> str:
        """``FILE[path] (sha256=…):`` and the text."""
        notes = [f"sha256={self.sha256}"]
        if self.start_line is not None or self.end_line is not None:
            notes.append(f"lines {self.start_line or 1}-{self.end_line or 'end'}")
        if self.text is None:
            notes.append(f"not UTF-8, {self.size} bytes, content not shown")
        header = f"FILE[{self.path}] ({', '.join(notes)}):"
        return header if self.text is None else f"{header}\n{self.text}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A context request that was not fulfilled, and why (no content)."""

    request: str
    reason: str

    def render(self) -> str:
        """``REFUSED[request]: reason``."""
        return f"REFUSED[{self.request}]: {self.reason}"


ContextBlock = FileBlock | Refusal


def read_file_block(
    root: str | os.PathLike[str],
    path: str,
    *,
    start_line: int | None = None,
    end_line: int | None = None,
    policy: PathPolicy,
    limits: PlanLimits,
    max_bytes: int,
    fs: FileSystem | None = None,
) -> ContextBlock:
    """Read ``path`` under ``root`` for the model, or say why not. Never raises for a path."""
    request = f"read_file {path}"
    codes = path_codes(path, limits, policy)
    if codes:
        return Refusal(request, f"unsafe path ({', '.join(sorted(codes))})")
    if protected_match(path, policy.protected) is not None:
        return Refusal(request, "protected path")
    try:
        tree = Tree(fs or FileSystem(), root)
    except OSError as exc:
        return Refusal(request, f"project root unreadable ({exc.strerror or exc})")
    try:
        head = tree.state(path, read=False)
        if head.kind == "none":
            return Refusal(request, "no such file")
        if head.kind == "dir":
            return Refusal(request, "a directory, not a file")
        state = tree.state(path)
    except OpsrunError as exc:
        return Refusal(request, f"{exc.code}: {exc.message}")
    except OSError as exc:
        return Refusal(request, f"unreadable ({exc.strerror or exc})")
    finally:
        tree.close()
    data = state.data or b""
    if len(data) > max_bytes:
        return Refusal(request, f"too large ({len(data)} bytes; the limit is {max_bytes})")
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return FileBlock(path, digest, len(data), None)
    if start_line is None and end_line is None:
        return FileBlock(path, digest, len(data), text)
    lines = text.splitlines(keepends=True)
    first = max(1, start_line or 1)
    last = min(len(lines), end_line or len(lines))
    return FileBlock(path, digest, len(data), "".join(lines[first - 1 : last]), first, last)


def render_context(blocks: Sequence[ContextBlock]) -> str:
    """The ``FULFILLED_CONTEXT`` block of a prompt ("" when there is nothing to show)."""
    if not blocks:
        return ""
    return "FULFILLED_CONTEXT:\n" + "\n\n".join(block.render() for block in blocks)
