"""The driver's context: blocks, the file-system port, the cache, the diet and auto-collect."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_plan_paths import ABSOLUTE, DRIVE, HOME, TRAVERSAL, UNC

from opsrun.protocol import (
    ContextBlock,
    ContextLimits,
    EnvBlock,
    FileBlock,
    FileSystemContext,
    LogsBlock,
    Refusal,
    SearchBlock,
    apply_diet,
    render_context,
)
from opsrun.protocol._autocollect import collect
from opsrun.protocol._context import ContextCache
from opsrun.protocol._diet import cut_middle

pytestmark = pytest.mark.anyio


def sha(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


def file(path: str, chars: int, *, priority: int = 0, fill: str = "x") -> FileBlock:
    text = (fill * chars)[:chars]
    return FileBlock(path, sha(text), chars, text, priority=priority)


# -- the 60/40 cut ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "limit", "head", "removed"),
    [
        (100, 100, 100, 0),  # fits: untouched
        (1000, 100, 42, 929),  # keep 71 = 100 - len(marker(929)); 60% of 71 = 42
        (50_000, 20_000, 11_981, 30_031),
    ],
)
def test_cut_middle_keeps_60_percent_head_40_percent_tail(
    length: int, limit: int, head: int, removed: int
) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(length))
    cut, gone = cut_middle(text, limit)
    assert gone == removed
    if not removed:
        assert cut == text
        return
    marker = f"\n...[TRUNCATED {removed} chars]...\n"
    assert len(cut) == limit
    assert cut == text[:head] + marker + text[length - (limit - len(marker) - head) :]
    kept = limit - len(marker)
    assert head == kept * 6 // 10


# -- the diet, rule by rule -----------------------------------------------------------------


def kinds(blocks: tuple[ContextBlock, ...]) -> list[str]:
    names = []
    for b in blocks:
        if isinstance(b, FileBlock):
            names.append(f"file:{b.path}")
        elif isinstance(b, SearchBlock):
            names.append(f"search:{b.query}")
        elif isinstance(b, LogsBlock):
            names.append(f"logs:{b.source}")
        elif isinstance(b, EnvBlock):
            names.append("env")
        else:
            names.append("refused")
    return names


def test_under_budget_nothing_changes() -> None:
    blocks: list[ContextBlock] = [file("a.py", 10), SearchBlock("q", None, ("a.py:1: x",))]
    diet = apply_diet(blocks, ContextLimits())
    assert diet.blocks == tuple(blocks)
    assert not diet.applied
    assert diet.stats()["context_total_chars"] == len(render_context(blocks))


def test_a_file_over_the_per_file_limit_is_cut_and_keeps_its_hash() -> None:
    big = file("big.py", 25_000)
    diet = apply_diet([big], ContextLimits())
    (kept,) = diet.blocks
    assert isinstance(kept, FileBlock)
    assert kept.sha256 == big.sha256
    assert kept.text is not None
    assert len(kept.text) == 20_000
    assert "...[TRUNCATED 5" in kept.text
    assert kept.truncated == 25_000 - (20_000 - len("\n...[TRUNCATED 5027 chars]...\n"))
    assert diet.stats()["context_truncated_files_count"] == 1


def test_the_block_limit_drops_search_then_logs_then_env_then_heuristic_files() -> None:
    blocks: list[ContextBlock] = [
        file("a.py", 10),
        SearchBlock("s1", None, ()),
        LogsBlock("app", 5, "log"),
        file("manifest.toml", 10, priority=1),
        EnvBlock("os: x"),
        SearchBlock("s2", None, ()),
        file("b.py", 10),
        LogsBlock("db", 5, "log"),
        Refusal("read_file .env", "protected path"),  # refusals never count nor drop
    ]
    limits = ContextLimits(max_blocks=3)
    diet = apply_diet(blocks, limits)
    assert kinds(diet.blocks) == ["file:a.py", "file:manifest.toml", "file:b.py", "refused"]
    assert kinds(diet.dropped) == ["search:s1", "logs:app", "env", "search:s2", "logs:db"]
    assert diet.stats()["context_files_count"] == 3
    assert diet.stats()["context_files_dropped_count"] == 5


def test_the_total_drops_search_and_logs_before_cutting_files() -> None:
    blocks: list[ContextBlock] = [
        file("a.py", 800),
        SearchBlock("q", None, tuple(f"a.py:{i}: hit" for i in range(60))),
        LogsBlock("app", 100, "l" * 800),
    ]
    limits = ContextLimits(max_total_chars=1_000, min_file_chars=0)
    diet = apply_diet(blocks, limits)
    assert kinds(diet.blocks) == ["file:a.py"]
    assert diet.truncated == 0  # dropping search and logs was enough
    assert diet.stats()["context_total_chars"] <= 1_000


def test_priority_zero_files_are_cut_latest_first_down_to_their_floor() -> None:
    blocks = [file("a.py", 9_000, fill="a"), file("b.py", 9_000, fill="b")]
    limits = ContextLimits(max_total_chars=10_000, min_file_chars=4_000)
    diet = apply_diet(blocks, limits)
    a, b = diet.blocks
    assert isinstance(a, FileBlock)
    assert isinstance(b, FileBlock)
    assert a.text is not None
    assert b.text is not None
    assert len(b.text) == 4_000  # the latest file went to its floor first
    assert len(render_context(diet.blocks)) <= 10_000
    assert a.truncated > 0  # then the earlier one took the rest of the cut
    assert diet.dropped == ()


def test_the_floor_wins_over_the_total() -> None:
    blocks = [file(f"f{i}.py", 6_000) for i in range(3)]
    diet = apply_diet(blocks, ContextLimits(max_total_chars=5_000, min_file_chars=4_000))
    assert [len(b.text or "") for b in diet.blocks if isinstance(b, FileBlock)] == [4_000] * 3
    assert diet.dropped == ()


def test_heuristic_files_are_dropped_not_cut_for_the_total() -> None:
    blocks = [file("mine.py", 3_000), file("poetry.lock", 3_000, priority=1)]
    diet = apply_diet(blocks, ContextLimits(max_total_chars=4_000))
    assert kinds(diet.blocks) == ["file:mine.py"]
    assert kinds(diet.dropped) == ["file:poetry.lock"]


block_lists = st.lists(
    st.one_of(
        st.builds(
            file,
            st.from_regex(r"[a-z]{1,8}\.py", fullmatch=True),
            st.integers(0, 30_000),
            priority=st.sampled_from([0, 1]),
        ),
        st.builds(
            SearchBlock,
            st.text("abc", min_size=1, max_size=5),
            st.none(),
            st.lists(st.text(max_size=80), max_size=30).map(tuple),
        ),
        st.builds(LogsBlock, st.sampled_from(["app", "db"]), st.just(10), st.text(max_size=5_000)),
        st.just(EnvBlock("os: Linux")),
        st.just(Refusal("read_file ../x", "unsafe path")),
    ),
    max_size=14,
)


@given(
    blocks=block_lists,
    max_blocks=st.integers(1, 10),
    max_total=st.integers(5_000, 130_000),
    max_file=st.integers(500, 25_000),
)
def test_diet_invariants(
    blocks: list[ContextBlock], max_blocks: int, max_total: int, max_file: int
) -> None:
    blocks = [dataclasses.replace(b) for b in blocks]  # distinct objects, to follow by id
    floor = 400
    limits = ContextLimits(
        max_blocks=max_blocks,
        max_total_chars=max_total,
        max_file_chars=max_file,
        min_file_chars=floor,
    )
    diet = apply_diet(blocks, limits)
    kept_files = [b for b in diet.blocks if isinstance(b, FileBlock)]
    total = len(render_context(diet.blocks))
    headers = sum(len(b.header()) + 2 for b in kept_files)
    assert total <= max(max_total, len("FULFILLED_CONTEXT:\n") + headers + floor * len(kept_files))
    assert sum(1 for b in diet.blocks if not isinstance(b, Refusal)) <= max_blocks
    originals = {id(b) for b in blocks}
    for b in diet.dropped:
        assert id(b) in originals
    assert len(diet.blocks) + len(diet.dropped) == len(blocks)
    dropped = {id(b) for b in diet.dropped}
    sources = [b for b in blocks if id(b) not in dropped]
    for b, source in zip(diet.blocks, sources, strict=True):  # order kept, hashes untouched
        if not isinstance(b, FileBlock):
            assert b is source
            continue
        assert isinstance(source, FileBlock)
        assert b.sha256 == source.sha256
        assert b.text is not None
        assert len(b.text) <= max_file
        assert (b.truncated > 0) == ("...[TRUNCATED" in b.text and b.text != source.text)


# -- the file-system port --------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("import os\n\ndef main():\n    return os.getcwd()\n")
    (tmp_path / "README.md").write_text("# App\nmain() prints the cwd\n")
    (tmp_path / ".env").write_text("TOKEN=hunter2\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "app.log").write_text("".join(f"line {i}\n" for i in range(100)))
    return tmp_path


ATTACKS = [*TRAVERSAL, *ABSOLUTE, *DRIVE, *UNC, *HOME, ".env", "config/.env", ".git/config",
           ".opsrun/journal.json", "keys/server.pem", "id_rsa", "secrets/token.txt"]  # fmt: skip


@pytest.mark.parametrize("path", ATTACKS)
async def test_context_reads_never_leave_the_root_nor_open_protected_files(
    project: Path, path: str
) -> None:
    context = FileSystemContext(root=project)
    block = await context.read_file(path)
    assert isinstance(block, Refusal)
    assert "hunter2" not in block.render()


async def test_a_link_out_of_the_root_is_refused(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret.txt"
    outside.write_text("outside secret\n")
    os.symlink(outside, project / "src" / "link.py")
    os.symlink(outside.parent, project / "linked_dir")
    context = FileSystemContext(root=project)
    for path in ("src/link.py", "linked_dir/secret.txt"):
        block = await context.read_file(path)
        assert isinstance(block, Refusal)
        assert "ERR_PATH_SYMLINK" in block.reason
    search = await context.search("outside secret")
    assert isinstance(search, SearchBlock)
    assert search.hits == ()


async def test_file_search_logs_and_env_blocks(project: Path) -> None:
    context = FileSystemContext(root=project, log_sources={"app": "logs/app.log"})
    block = await context.read_file("src/app.py", 3, 4)
    assert isinstance(block, FileBlock)
    assert block.sha256 == hashlib.sha256((project / "src/app.py").read_bytes()).hexdigest()
    header = f"FILE[src/app.py] (sha256={block.sha256}, lines 3-4):"
    assert block.render() == header + "\ndef main():\n    return os.getcwd()\n"
    search = await context.search("MAIN(")
    assert isinstance(search, SearchBlock)
    assert search.hits == ("README.md:2: main() prints the cwd", "src/app.py:3: def main():")
    only_py = await context.search("main", "*.py")
    assert isinstance(only_py, SearchBlock)
    assert [h.split(":")[0] for h in only_py.hits] == ["src/app.py"]
    assert "hunter2" not in render_context([await context.search("TOKEN")])
    logs = await context.logs("app", 3)
    assert isinstance(logs, LogsBlock)
    assert logs.render() == "LOGS[app] (last_n=3):\nline 97\nline 98\nline 99"
    unknown = await context.logs("kernel", 3)
    assert isinstance(unknown, Refusal)
    assert "known: app" in unknown.reason
    env = await context.env()
    assert isinstance(env, EnvBlock)
    assert f"python: {sys.version.split()[0]}" in env.text
    assert "TOKEN" not in env.text


async def test_the_cache_fetches_each_request_once_and_keys_logs_by_last_n(project: Path) -> None:
    events: list[tuple[str, str, str]] = []
    cache = ContextCache(
        FileSystemContext(root=project, log_sources={"app": "logs/app.log"}),
        on_hit=lambda kind, key: events.append(("hit", kind, key)),
        on_miss=lambda kind, key: events.append(("miss", kind, key)),
    )
    first = await cache.read_file("README.md", None, None)
    (project / "README.md").write_text("changed\n")
    second = await cache.read_file("README.md", None, None)
    assert first == second  # one read per turn
    await cache.logs("app", 5)
    await cache.logs("app", 10)  # another last_n: another entry
    await cache.logs("app", 5)
    await cache.env()
    await cache.env()
    assert [e[:2] for e in events] == [
        ("miss", "read"),
        ("hit", "read"),
        ("miss", "logs"),
        ("miss", "logs"),
        ("hit", "logs"),
        ("miss", "env"),
        ("hit", "env"),
    ]
    stats = cache.stats()
    assert stats["hits"] == {"read": 1, "search": 0, "logs": 1, "env": 1}
    assert stats["misses"] == {"read": 1, "search": 0, "logs": 2, "env": 1}
    assert stats["hit_rate"] == pytest.approx(3 / 7)


# -- auto-collect ----------------------------------------------------------------------------


def run_python(project: Path, code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, check=False
    )
    assert completed.returncode != 0
    return completed.stderr


def test_auto_collect_reads_around_the_lines_of_a_real_traceback(project: Path) -> None:
    body = (
        "".join(f"x{i} = {i}\n" for i in range(200)) + "def boom():\n    raise ValueError('no')\n"
    )
    (project / "src" / "deep.py").write_text(body)
    report = run_python(project, "import sys; sys.path.insert(0, 'src'); import deep; deep.boom()")
    assert 'deep.py", line 202' in report
    wanted, env = collect(report, project)
    assert not env
    assert [(w.path, w.start_line, w.end_line, w.priority) for w in wanted] == [
        ("src/deep.py", 122, 282, 0)
    ]


def test_auto_collect_on_a_real_import_error_adds_env_and_manifests(project: Path) -> None:
    (project / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    (project / "requirements.txt").write_text("requests\n")
    report = run_python(project, "import surely_not_installed_xyz")
    assert "ModuleNotFoundError" in report
    wanted, env = collect(report, project)
    assert env
    assert [(w.path, w.priority) for w in wanted] == [
        ("pyproject.toml", 1),
        ("requirements.txt", 1),
    ]


def test_auto_collect_reads_path_line_references_and_skips_outside_files(project: Path) -> None:
    text = (
        "src/app.py:3:5: error: bad thing\n"
        "  at main (/usr/lib/node_modules/x.js:10:2)\n"
        f'  File "{project / "src" / "app.py"}", line 4, in main\n'
        '  File "/usr/lib/python3.11/os.py", line 1, in getcwd\n'
        "nothing/here.py:9: missing file\n"
    )
    wanted, env = collect(text, project)
    assert not env
    assert [(w.path, w.start_line, w.end_line) for w in wanted] == [("src/app.py", 1, 84)]


def test_cannot_find_module_counts_as_an_import_error(project: Path) -> None:
    (project / "package.json").write_text("{}\n")
    wanted, env = collect("Error: Cannot find module 'left-pad'", project)
    assert env
    assert [w.path for w in wanted] == ["package.json"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_auto_collect_never_names_a_path_outside_the_project(project: Path, text: str) -> None:
    wanted, _ = collect(text + "\n../../etc/passwd:1\n/etc/passwd:3", project)
    for item in wanted:
        resolved = (project / item.path).resolve()
        assert resolved.is_relative_to(project.resolve())
        assert resolved.is_file()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=25)
@given(
    files=st.dictionaries(
        st.from_regex(r"[a-z]{1,6}\.py", fullmatch=True),
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=3_000),
        min_size=1,
        max_size=6,
    ),
    max_total=st.integers(2_000, 20_000),
    max_file=st.integers(200, 3_000),
)
async def test_every_file_hash_sent_is_the_hash_of_the_file_on_disk(
    tmp_path_factory: pytest.TempPathFactory, files: dict[str, str], max_total: int, max_file: int
) -> None:
    root = tmp_path_factory.mktemp("random")
    for name, text in files.items():
        (root / name).write_bytes(text.encode("utf-8"))
    context = FileSystemContext(root=root)
    blocks = [await context.read_file(name) for name in files]
    limits = ContextLimits(
        max_total_chars=max_total, max_file_chars=max_file, min_file_chars=100, max_blocks=4
    )
    sent = render_context(apply_diet(blocks, limits).blocks)
    for path, digest in re.findall(r"FILE\[([^\]]+)\] \(sha256=([0-9a-f]{64})", sent):
        assert digest == hashlib.sha256((root / path).read_bytes()).hexdigest()
