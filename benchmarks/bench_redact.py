"""Cost of redaction on clean text: today's rules against the rules before the families grew.

Every run records its errors, summaries, params, prompt snapshot and streamed reply through
``Redactor.redact``, and most of that text holds no secret at all, so the clean-text cost is
the one that matters. Workloads, each redacted whole:

* ``prose``: 10 KB of chat-like English (``key``, ``token``, ``password`` appear as words);
* ``json``: 10 KB of tool-output JSON with URLs, ids, hashes and escaped newlines;
* ``code``: 10 KB of Python source with ``api_key = os.environ[...]`` lines — which the
  assignment rule does match (and then leaves, an indexed name being code), so the full
  rule runs here;
* ``prose_1mb``: 1 MB of the prose;
* ``dirty``: 10 KB of prose with one key of each family every few hundred characters (for
  information: here the new rules do strictly more work).

A second table streams text word by word through ``StreamRedactor`` (as the runner does
with a reply): plain prose, and lines that stay open to their end — ``password: "``, a
``Cookie:`` header, a ``passphrase:`` — which used to cost cubic time. The baseline is the
same text redacted whole, once, in the same rounds; the ratio is stream / whole. It stays
flat from 500 to 2,000 words when the stream is linear.

The baseline is ``src/opsrun/_redact.py`` as of commit ``a1474c8`` (the last one before the
glued-key and new-family rules), read with ``git show`` and loaded beside the current module,
so both are measured in the same process, interleaved. Timings are CPU time of this process
(``time.process_time``): the median of interleaved rounds, with the min–max range.

Run: ``.venv/bin/python benchmarks/bench_redact.py``
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

BASELINE_COMMIT = "a1474c8"
ROOT = Path(__file__).resolve().parent.parent


def load_baseline() -> ModuleType | None:
    """The redaction module as it was at ``BASELINE_COMMIT``, or None without git history."""
    try:
        source = subprocess.run(
            ["git", "show", f"{BASELINE_COMMIT}:src/opsrun/_redact.py"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    spec = importlib.util.spec_from_loader("_redact_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_redact_before"] = module
    exec(compile(source, "_redact_before.py", "exec"), module.__dict__)
    return module


PROSE = (
    "The deploy finished at 14:02 and the key metrics look fine. Remember that the token "
    "budget for the summariser is 512 and the password policy needs review next week. "
    "We moved the cache to a disk-based store; risk-free rollback is documented in the "
    "runbook, section 4.2. Bearer of bad news: the nightly job failed twice on Tuesday. "
)
JSON_ROW = {
    "id": "3f786850e387550fdab836ed7e6dc881de23001b",
    "url": "https://api.example.com/v1/items?page=2&sort=desc",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "text": "line one\nline two\n\tindented: value",
    "tokens": {"input": 1234, "output": 56},
}
CODE = (
    "def connect(settings):\n"
    "    api_key = os.environ['SERVICE_API_KEY']\n"
    "    url = settings.get('url', 'https://example.com:8443/path')\n"
    "    for attempt in range(3):\n"
    "        response = session.get(url, headers={'Accept': 'application/json'})\n"
    "        if response.ok:\n"
    "            return response.json()['items']\n"
    "    raise RuntimeError(f'failed after {attempt} attempts: {response.status_code}')\n"
)
KEYS = [
    "sk-proj-" + "Ab3dEfGhIjKlMnOpQrStUvWxYz0123456789",
    "ghp_" + "a1B2" * 9,
    "AKIA" + "IOSFODNN7EXAMPLE",
    "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH",
    "postgres://app:" + "s3cr3t-Pa55word@db/app",
    "xoxb-" + "123456789012-AbCdEfGhIjKl",
    "password=" + "hunter2hunter2",
]


def fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def workloads() -> dict[str, str]:
    dirty_unit = "".join(f"{PROSE[:200]} {key} " for key in KEYS)
    return {
        "prose": fill(PROSE, 10_000),
        "json": fill(json.dumps([JSON_ROW] * 4), 10_000),
        "code": fill(CODE, 10_000),
        "prose_1mb": fill(PROSE, 1_000_000),
        "dirty": fill(dirty_unit, 10_000),
    }


def interleaved(
    fns: list[Callable[[], object]], rounds: int, number: int
) -> list[tuple[float, float, float]]:
    """CPU seconds per call of each function: (median, min, max) over interleaved rounds."""
    timings: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.process_time()
            for _ in range(number):
                fn()
            timings[i].append((time.process_time() - start) / number)
    return [(statistics.median(t), min(t), max(t)) for t in timings]


def fmt(stat: tuple[float, float, float]) -> str:
    median, low, high = (s * 1e6 for s in stat)
    return f"{median:10.1f} µs  ({low:.1f}–{high:.1f})"


def redact_with(module: object, text: str) -> Callable[[], object]:
    redactor = module.DEFAULT_REDACTOR  # type: ignore[attr-defined]  # loaded from git
    return lambda: redactor.redact(text)


def main() -> None:
    before = load_baseline()
    print("CPU time per redact() call: median of interleaved rounds (min–max)")
    print(f"baseline: the rules at {BASELINE_COMMIT}; ratio = now / before")
    print(f"{'workload':<10} {'now':>34} {'before':>34} {'ratio':>7}")
    for name, text in workloads().items():
        big = len(text) > 100_000
        rounds, number = (7, 3) if big else (15, 200)
        fns: list[Callable[[], object]] = [redact_with(sys.modules["opsrun._redact"], text)]
        if before is not None:
            fns.append(redact_with(before, text))
        stats = interleaved(fns, rounds, number)
        if before is None:
            print(f"{name:<10} {fmt(stats[0]):>34} {'(no git history)':>34}")
            continue
        ratio = stats[0][0] / stats[1][0]
        print(f"{name:<10} {fmt(stats[0]):>34} {fmt(stats[1]):>34} {ratio:6.2f}x")


STREAM_OPENINGS = {
    "prose": "Hello there ",
    "password": 'The config reads password: "',
    "cookie": "Send Cookie: a=b ",
    "passphrase": "passphrase: ",
}


def streamed(text: str) -> Callable[[], object]:
    """Feed ``text`` word by word to a fresh ``StreamRedactor``, then flush."""
    redactor = sys.modules["opsrun._redact"]
    words = [w + " " for w in text.split(" ")]

    def run() -> object:
        stream = redactor.StreamRedactor(redactor.DEFAULT_REDACTOR)
        out = [stream.feed(w) for w in words]
        out.append(stream.flush())
        return out

    return run


def redact_with_module(redactor: object, text: str) -> Callable[[], object]:
    return lambda: redactor.redact(text)  # type: ignore[attr-defined]  # the module's redactor


def stream_main() -> None:
    """Streamed redaction against whole-text redaction of the same text."""
    whole = sys.modules["opsrun._redact"].DEFAULT_REDACTOR
    print()
    print("CPU time per streamed reply, word by word (min–max); ratio = stream / whole text")
    print(f"{'workload':<16} {'stream':>34} {'whole text':>34} {'ratio':>7}")
    for words in (500, 2000):
        for name, opening in STREAM_OPENINGS.items():
            text = opening + "".join(f"word{i % 10} " for i in range(words)) + "\nthe end"
            fns: list[Callable[[], object]] = [streamed(text), redact_with_module(whole, text)]
            stream_stat, whole_stat = interleaved(fns, 7, 3)
            ratio = stream_stat[0] / whole_stat[0]
            label = f"{name} {words}w"
            print(f"{label:<16} {fmt(stream_stat):>34} {fmt(whole_stat):>34} {ratio:6.0f}x")


if __name__ == "__main__":
    main()
    stream_main()
