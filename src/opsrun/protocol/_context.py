"""What the model is shown of the project: context blocks, the port that fetches them,
the file-system default, and the per-turn cache.

Every block renders as one section of the prompt's ``FULFILLED_CONTEXT``::

    FILE[src/app.py] (sha256=<hash of the whole file>):
    <text>
    FILE[src/app.py] (sha256=<hash>, lines 10-90):
    SEARCH[query] (glob=*.py, 3 hits):
    src/app.py:12: the matching line
    LOGS[app] (last_n=50):
    <the last lines>
    ENV:
    <key: value lines>
    REFUSED[read_file ../../etc/passwd]: unsafe path (ERR_PATH_TRAVERSAL)

A read never leaves the root, never follows a link and never opens a protected file
(``.env``, keys, ``secrets/``, ``.git``, ``.opsrun``): such a request becomes a
``REFUSED[...]`` line, never the content. A file block's sha256 is always of the whole
file, also when only some lines are shown or the diet cut it: it is what the model copies
into ``base_sha256``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import platform
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Protocol

import anyio

from opsrun.errors import OpsrunError

from ._fs import FileSystem, Tree
from ._limits import PathPolicy, PlanLimits
from ._paths import path_codes, protected_match

__all__ = [
    "ContextBlock",
    "ContextCache",
    "EnvBlock",
    "FileBlock",
    "FileSystemContext",
    "LogsBlock",
    "ProjectContext",
    "Refusal",
    "SearchBlock",
    "read_file_block",
    "render_context",
    "tail_text",
]


@dataclass(frozen=True, slots=True)
class FileBlock:
    """A file shown to the model.

    Attributes:
        path: The path as requested (relative to the root).
        sha256: Hex sha256 of the whole file (never of the part shown).
        size: The file's size in bytes.
        text: The text shown, or None when the file is not UTF-8.
        start_line: First line shown (1-based), when a range was asked for.
        end_line: Last line shown, when a range was asked for.
        priority: 0 for files the model or the user asked for (kept longest, and at least
            4,000 characters by the diet), 1 for files gathered by heuristics.
        truncated: Characters the diet cut from ``text``.
    """

    path: str
    sha256: str
    size: int
    text: str | None
    start_line: int | None = None
    end_line: int | None = None
    priority: int = 0
    truncated: int = 0

    @property
    def whole(self) -> bool:
        """Whether the model sees every line of the file.

        False when the diet cut the text, or when a line range leaves lines out. A
        non-UTF-8 file, shown by its header only, counts as whole: it can only be
        replaced whole.
        """
        if self.truncated:
            return False
        if self.text is None or (self.start_line is None and self.end_line is None):
            return True
        return len(self.text.encode("utf-8", "surrogatepass")) == self.size

    def header(self) -> str:
        """``FILE[path] (sha256=…, …):``."""
        notes = [f"sha256={self.sha256}"]
        if self.start_line is not None or self.end_line is not None:
            notes.append(f"lines {self.start_line or 1}-{self.end_line or 'end'}")
        if self.text is None:
            notes.append(f"not UTF-8, {self.size} bytes, content not shown")
        return f"FILE[{self.path}] ({', '.join(notes)}):"

    def render(self) -> str:
        """The header and the text."""
        return self.header() if self.text is None else f"{self.header()}\n{self.text}"


@dataclass(frozen=True, slots=True)
class SearchBlock:
    """Lines of the project matching a query: ``path:line: text`` each."""

    query: str
    glob: str | None
    hits: tuple[str, ...]

    def render(self) -> str:
        """``SEARCH[query] (glob=…, N hits):`` and the hits."""
        glob = f"glob={self.glob}, " if self.glob else ""
        body = "\n".join(self.hits) if self.hits else "(no matches)"
        return f"SEARCH[{self.query}] ({glob}{len(self.hits)} hits):\n{body}"


@dataclass(frozen=True, slots=True)
class LogsBlock:
    """The last lines of a log source the host declared."""

    source: str
    last_n: int
    text: str

    def render(self) -> str:
        """``LOGS[source] (last_n=N):`` and the lines."""
        return f"LOGS[{self.source}] (last_n={self.last_n}):\n{self.text}"


@dataclass(frozen=True, slots=True)
class EnvBlock:
    """Facts about the environment (no environment variables: they hold secrets)."""

    text: str

    def render(self) -> str:
        """``ENV:`` and ``key: value`` lines."""
        return f"ENV:\n{self.text}"


REFUSAL_TEXT_CHARS = 200
"""The most characters of a request (and of a reason) a refusal line echoes."""


def _bounded(text: str) -> str:
    return text if len(text) <= REFUSAL_TEXT_CHARS else text[: REFUSAL_TEXT_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A context request that was not fulfilled, and why (no content).

    ``request`` and ``reason`` are cut to 200 characters each (the request is the
    model's own text, which nothing else bounds).
    """

    request: str
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "request", _bounded(self.request))
        object.__setattr__(self, "reason", _bounded(self.reason))

    def render(self) -> str:
        """``REFUSED[request]: reason``."""
        return f"REFUSED[{self.request}]: {self.reason}"


ContextBlock = FileBlock | SearchBlock | LogsBlock | EnvBlock | Refusal
"""One section of ``FULFILLED_CONTEXT``."""


def render_context(blocks: Sequence[ContextBlock]) -> str:
    """The ``FULFILLED_CONTEXT`` section of a prompt ("" when there is nothing to show)."""
    if not blocks:
        return ""
    return "FULFILLED_CONTEXT:\n" + "\n\n".join(block.render() for block in blocks)


class ProjectContext(Protocol):
    """Where the driver's context comes from; :class:`FileSystemContext` is the default.

    Each method answers with a block or a :class:`Refusal` and never raises for a bad
    request (an unsafe path, an unknown log source).
    """

    async def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ContextBlock:
        """A file, or lines of it."""
        ...

    async def search(self, query: str, glob: str | None = None) -> ContextBlock:
        """Lines of the project containing ``query``."""
        ...

    async def logs(self, source: str, last_n: int) -> ContextBlock:
        """The last ``last_n`` lines of a log source."""
        ...

    async def env(self) -> ContextBlock:
        """Facts about the environment."""
        ...


LogSource = str | os.PathLike[str] | Callable[[int], str]
"""A log: a file (relative to the root, or absolute) or a function of ``last_n``."""

_SKIP_DIRS = frozenset({".git", ".opsrun", "node_modules", "__pycache__", ".venv", "venv"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSystemContext:
    """Reads the project directory under the plan's path rules.

    Args:
        root: The project directory.
        policy: Path rules (the plan's: protected files, reserved directories, whitelist).
        limits: Path limits.
        max_file_bytes: Largest file read; a bigger one is refused.
        log_sources: Named logs the model may ask for (``{"app": "logs/app.log"}``); any
            other source is refused.
        max_search_hits: Most lines a search returns.
        max_search_files: Most files a search opens.
    """

    root: Path
    policy: PathPolicy = field(default_factory=PathPolicy)
    limits: PlanLimits = field(default_factory=PlanLimits)
    max_file_bytes: int = 2 * 1024 * 1024
    log_sources: Mapping[str, LogSource] = field(default_factory=dict)
    max_search_hits: int = 50
    max_search_files: int = 5000

    async def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ContextBlock:
        """A file, or lines of it (never outside the root, never a protected file)."""
        return await anyio.to_thread.run_sync(
            lambda: read_file_block(
                self.root,
                path,
                start_line=start_line,
                end_line=end_line,
                policy=self.policy,
                limits=self.limits,
                max_bytes=self.max_file_bytes,
            )
        )

    async def search(self, query: str, glob: str | None = None) -> ContextBlock:
        """Case-insensitive literal search over readable UTF-8 files of the project."""
        return await anyio.to_thread.run_sync(self._search, query, glob)

    async def logs(self, source: str, last_n: int) -> ContextBlock:
        """The last lines of a declared log source."""
        return await anyio.to_thread.run_sync(self._logs, source, last_n)

    async def env(self) -> ContextBlock:
        """Operating system, Python, and which project manifests exist."""
        return await anyio.to_thread.run_sync(self._env)

    def _search(self, query: str, glob: str | None) -> ContextBlock:
        request = f"search {query}"
        if not query.strip():
            return Refusal(request, "empty query")
        if glob is not None and (glob.startswith(("/", "~")) or ".." in glob.split("/")):
            return Refusal(request, "unsafe glob")
        needle = query.casefold()
        hits: list[str] = []
        for count, rel in enumerate(self._walk()):
            if count >= self.max_search_files or len(hits) >= self.max_search_hits:
                break
            if glob is not None and not (
                fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(rel.rsplit("/", 1)[-1], glob)
            ):
                continue
            block = read_file_block(
                self.root, rel, policy=self.policy, limits=self.limits,
                max_bytes=self.max_file_bytes,
            )  # fmt: skip
            if not isinstance(block, FileBlock) or block.text is None:
                continue
            for number, line in enumerate(block.text.splitlines(), 1):
                if needle in line.casefold():
                    hits.append(f"{rel}:{number}: {line.strip()[:200]}")
                    if len(hits) >= self.max_search_hits:
                        break
        return SearchBlock(query, glob, tuple(hits))

    def _walk(self) -> Iterator[str]:
        """Relative paths of regular files, sorted, skipping links and tool folders."""
        for current, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            base = Path(current)
            for name in sorted(files):
                full = base / name
                if full.is_symlink():
                    continue
                yield full.relative_to(self.root).as_posix()

    def _logs(self, source: str, last_n: int) -> ContextBlock:
        request = f"logs {source}"
        where = self.log_sources.get(source)
        if where is None:
            known = ", ".join(sorted(self.log_sources)) or "none"
            return Refusal(request, f"unknown log source (known: {known})")
        if last_n < 1:
            return Refusal(request, "last_n must be at least 1")
        if callable(where):
            text = where(last_n)
        else:
            try:
                with Path(self.root, where).open("rb") as file:
                    text = tail_text(file, last_n, self.max_file_bytes)
            except OSError as exc:
                return Refusal(request, f"unreadable ({exc.strerror or exc})")
        lines = text.splitlines()[-last_n:]
        return LogsBlock(source, last_n, "\n".join(lines))

    def _env(self) -> ContextBlock:
        manifests = [
            name
            for name in (
                "pyproject.toml",
                "requirements.txt",
                "poetry.lock",
                "uv.lock",
                "package.json",
                "package-lock.json",
                "Cargo.toml",
                "go.mod",
                "Makefile",
            )
            if (self.root / name).is_file()
        ]
        facts = {
            "os": f"{platform.system()} {platform.release()}",
            "python": sys.version.split()[0],
            "project_files": ", ".join(manifests) or "(none of the usual manifests)",
        }
        return EnvBlock("\n".join(f"{k}: {v}" for k, v in facts.items()))


_TAIL_CHUNK = 64 * 1024


def tail_text(file: BinaryIO, last_n: int, max_bytes: int) -> str:
    """The end of a seekable binary file holding its last ``last_n`` lines, read backwards
    in chunks of 64 KiB.

    At most ``max_bytes`` are read however long the lines are; a line cut at that
    bound is left out. Invalid UTF-8 is replaced.

    Raises:
        OSError: the file cannot be read.
    """
    end = file.seek(0, os.SEEK_END)
    start, data = end, b""
    while start > 0 and data.count(b"\n") <= last_n and end - start < max_bytes:
        step = min(_TAIL_CHUNK, start, max_bytes - (end - start))
        start -= step
        file.seek(start)
        data = file.read(step) + data
    if start > 0:  # the first line may be cut: keep only whole lines
        data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
    return data.decode("utf-8", "replace")


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
        state = tree.state(path, max_bytes=max_bytes)  # a bigger file is not read at all
    except OpsrunError as exc:
        if exc.code == "ERR_FILE_TOO_LARGE":
            size = exc.details.get("size")
            return Refusal(request, f"too large ({size} bytes; the limit is {max_bytes})")
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


CacheKey = tuple[str, ...]
_TYPES = ("read", "search", "logs", "env")


@dataclass(slots=True)
class ContextCache:
    """Context fetched once per turn: read, search, logs (keyed by source and last_n), env.

    ``on_hit`` / ``on_miss`` receive the type and the key's text (the driver turns them
    into ``CONTEXT_CACHE_HIT`` / ``CONTEXT_CACHE_MISS`` events).
    """

    source: ProjectContext
    on_hit: Callable[[str, str], None] = lambda kind, key: None
    on_miss: Callable[[str, str], None] = lambda kind, key: None
    _blocks: dict[CacheKey, ContextBlock] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_TYPES, 0))
    misses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_TYPES, 0))

    async def read_file(
        self, path: str, start_line: int | None, end_line: int | None, *, priority: int = 0
    ) -> ContextBlock:
        key = ("read", path, str(start_line), str(end_line))
        block = await self._get(key, lambda: self.source.read_file(path, start_line, end_line))
        if isinstance(block, FileBlock) and block.priority != priority:
            return replace(block, priority=priority)
        return block

    async def search(self, query: str, glob: str | None) -> ContextBlock:
        return await self._get(
            ("search", query, str(glob)), lambda: self.source.search(query, glob)
        )

    async def logs(self, source: str, last_n: int) -> ContextBlock:
        return await self._get(
            ("logs", source, str(last_n)), lambda: self.source.logs(source, last_n)
        )

    async def env(self) -> ContextBlock:
        return await self._get(("env",), self.source.env)

    async def _get(
        self, key: CacheKey, fetch: Callable[[], Awaitable[ContextBlock]]
    ) -> ContextBlock:
        kind = key[0]
        text = " ".join(key[1:])
        cached = self._blocks.get(key)
        if cached is not None:
            self.hits[kind] += 1
            self.on_hit(kind, text)
            return cached
        self.misses[kind] += 1
        self.on_miss(kind, text)
        block = await fetch()
        self._blocks[key] = block
        return block

    def stats(self) -> dict[str, object]:
        """``{"hits": {...}, "misses": {...}, "hit_rate": float}`` for the trace."""
        hits, misses = sum(self.hits.values()), sum(self.misses.values())
        total = hits + misses
        return {
            "hits": dict(self.hits),
            "misses": dict(self.misses),
            "hit_rate": hits / total if total else 0.0,
        }
