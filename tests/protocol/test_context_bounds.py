"""What the context reads stays bounded: huge files are refused before they are read,
logs are read from the end, and refusal lines count toward the diet's budget."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from opsrun.protocol import (
    ContextLimits,
    FileBlock,
    FileSystemContext,
    LogsBlock,
    PathPolicy,
    PlanLimits,
    Refusal,
    SearchBlock,
    apply_diet,
    render_context,
)
from opsrun.protocol._context import read_file_block
from opsrun.protocol._fs import FileSystem

pytestmark = pytest.mark.anyio

HUGE = 64 * 1024 * 1024  # sparse: costs no disk


class CountingFileSystem(FileSystem):
    """Counts the bytes read through the file-system door."""

    def __init__(self) -> None:
        self.bytes_read = 0

    def read(self, fd: int) -> bytes:
        data = super().read(fd)
        self.bytes_read += len(data)
        return data


class CountingReader(io.BytesIO):
    """An in-memory file that counts the bytes read from it."""

    bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.bytes_read += len(data)
        return data


def sparse(path: Path, size: int, tail: bytes = b"") -> None:
    with path.open("wb") as file:
        file.truncate(size - len(tail))
        file.seek(size - len(tail))
        file.write(tail)


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    sparse(tmp_path / "data.bin", HUGE)
    fs = CountingFileSystem()
    block = read_file_block(
        tmp_path,
        "data.bin",
        policy=PathPolicy(),
        limits=PlanLimits(),
        max_bytes=1024,
        fs=fs,
    )
    assert block == Refusal("read_file data.bin", f"too large ({HUGE} bytes; the limit is 1024)")
    assert fs.bytes_read == 0


async def test_search_skips_files_over_the_limit_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sparse(tmp_path / "big.txt", HUGE, tail=b"\nneedle\n")
    (tmp_path / "small.txt").write_text("a needle here\n")
    read: list[int] = []
    original = FileSystem.read

    def counting(self: FileSystem, fd: int) -> bytes:
        data = original(self, fd)
        read.append(len(data))
        return data

    monkeypatch.setattr(FileSystem, "read", counting)
    context = FileSystemContext(root=tmp_path, max_file_bytes=4096)
    block = await context.search("needle")
    assert isinstance(block, SearchBlock)
    assert block.hits == ("small.txt:1: a needle here",)
    assert sum(read) < 4096


async def test_logs_are_read_from_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sparse(tmp_path / "app.log", HUGE, tail=b"\nline 1\nline 2\nline 3\n")
    read: list[int] = []
    original = Path.open

    def counting_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        file = original(self, *args, **kwargs)
        real_read = file.read

        def read_and_count(*a: Any) -> Any:
            data = real_read(*a)
            read.append(len(data))
            return data

        file.read = read_and_count
        return file

    monkeypatch.setattr(Path, "open", counting_open)
    context = FileSystemContext(root=tmp_path, log_sources={"app": "app.log"})
    block = await context.logs("app", 2)
    monkeypatch.undo()
    assert block == LogsBlock("app", 2, "line 2\nline 3")
    assert sum(read) <= 64 * 1024


def test_tail_text_reads_one_chunk_for_short_lines() -> None:
    from opsrun.protocol._context import tail_text

    lines = [f"line {i}" for i in range(200_000)]  # about 2 MB
    reader = CountingReader(("\n".join(lines) + "\n").encode())
    assert tail_text(reader, 3, 1 << 20).splitlines()[-3:] == lines[-3:]
    assert reader.bytes_read <= 64 * 1024


def test_logs_read_at_most_max_bytes_of_one_long_line() -> None:
    from opsrun.protocol._context import tail_text

    reader = CountingReader(b"x" * (8 << 20) + b"\nlast\n")
    assert tail_text(reader, 2, 1 << 20) == "last\n"  # the cut line is left out
    assert reader.bytes_read <= 1 << 20


def test_tail_text_of_a_short_file() -> None:
    from opsrun.protocol._context import tail_text

    assert tail_text(io.BytesIO(b"a\nb\n"), 5, 1024) == "a\nb\n"
    assert tail_text(io.BytesIO(b"a\nb"), 1, 1024).splitlines()[-1:] == ["b"]
    assert tail_text(io.BytesIO(b""), 1, 1024) == ""


def test_refusals_echo_at_most_200_characters() -> None:
    long = "a/" * 40_000 + "x.py"
    refusal = Refusal(f"read_file {long}", "no such file " + "y" * 1000)
    assert len(refusal.request) == 200
    assert refusal.request.endswith("…")
    assert len(refusal.reason) == 200
    assert len(refusal.render()) < 420


def test_refusals_count_toward_the_total() -> None:
    limits = ContextLimits(max_total_chars=2000)
    refusals = [Refusal(f"read_file missing{i}.py", "no such file") for i in range(200)]
    file = FileBlock("app.py", "0" * 64, 10, "print(1)\n")
    diet = apply_diet([file, *refusals], limits)
    assert len(render_context(diet.blocks)) <= 2000
    assert diet.blocks[0] == file  # files the model asked for stay
    assert diet.stats()["context_total_chars"] <= 2000
