"""Run ids on log records, and a runner without OpenTelemetry installed."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from _support import A, B, generate, make_runner, op, use_profile
from opsrun._logs import run_logger
from opsrun.model import OperationDefinition, OperationResult, RunRequest
from opsrun.operations import OperationCatalog, OperationContext, SyncOperation
from opsrun.runner import ThreadExecutor
from opsrun.stores import InMemoryStores
from opsrun.telemetry import RunLogFilter, log_context

host_log = logging.getLogger("host.operations")
NO_PROFILE = RunRequest(trigger="generate", chat_id="c", user_message="hi")


class Records(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def fields(self, name: str) -> list[tuple[str, str, str]]:
        """``(message, run_id, operation_id)`` of the records of logger ``name``."""
        return [
            (r.getMessage(), r.__dict__.get("run_id", "?"), r.__dict__.get("operation_id", "?"))
            for r in self.records
            if r.name == name
        ]


@pytest.fixture
def records() -> Iterator[Records]:
    """A handler with :class:`RunLogFilter` on the ``host`` and ``opsrun`` loggers."""
    handler = Records()
    handler.addFilter(RunLogFilter())
    loggers = [logging.getLogger("host"), logging.getLogger("opsrun")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield handler
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


class Blocking(SyncOperation[Any]):
    definition = OperationDefinition(operation_id="blocking", name="Blocking", kind="compute")

    def run_sync(self, ctx: OperationContext[Any]) -> OperationResult:
        host_log.info("in a thread")
        return OperationResult.done()


@pytest.mark.anyio
async def test_records_logged_during_a_run_carry_its_ids(records: Records) -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    catalog.add(Blocking())

    @catalog.function("notes", name="Notes")
    async def notes(ctx: OperationContext[Any]) -> OperationResult:
        host_log.info("taking notes")
        return OperationResult.done()

    runner = make_runner(stores=stores, catalog=catalog, executor=ThreadExecutor())
    await use_profile(stores, op("notes", B, A), op("blocking", B))
    host_log.info("before")
    result = await runner.run(generate())
    host_log.info("after")

    run_id = result.run.run_id
    assert sorted(records.fields("host.operations")) == sorted(
        [
            ("before", "-", "-"),
            ("taking notes", run_id, "notes"),
            ("in a thread", run_id, "blocking"),
            ("taking notes", run_id, "notes"),
            ("after", "-", "-"),
        ]
    )
    assert records.fields("opsrun.runner") == [
        ("run started (generate, chat c)", run_id, "-"),
        ("run finished: done", run_id, "-"),
    ]


@pytest.mark.anyio
async def test_opsrun_records_carry_the_ids_without_the_filter() -> None:
    handler = Records()
    logger = logging.getLogger("opsrun.runner")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        result = await make_runner().run(NO_PROFILE)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert {(r.__dict__["run_id"], r.__dict__["operation_id"]) for r in handler.records} == {
        (result.run.run_id, "-")
    }


def test_a_value_the_record_already_has_is_kept(records: Records) -> None:
    host_log.info("explicit", extra={"run_id": "mine"})
    assert records.fields("host.operations") == [("explicit", "mine", "-")]


def test_log_context_outside_a_run() -> None:
    assert log_context() == {"run_id": "-", "operation_id": "-"}


@pytest.mark.anyio
async def test_log_context_inside_an_operation() -> None:
    seen: list[dict[str, str]] = []
    stores = InMemoryStores()
    catalog = OperationCatalog()

    @catalog.function("probe", name="Probe")
    async def probe(ctx: OperationContext[Any]) -> OperationResult:
        seen.append(log_context())
        return OperationResult.done()

    await use_profile(stores, op("probe", B))
    runner = make_runner(stores=stores, catalog=catalog)
    result = await runner.run(generate())
    assert seen == [{"run_id": result.run.run_id, "operation_id": "probe"}]


WITHOUT_OPENTELEMETRY = textwrap.dedent(
    """
    import sys

    sys.modules["opentelemetry"] = None  # as if it were not installed: import fails

    import anyio

    from opsrun import InMemoryStores, OperationCatalog, Runner, RunRequest
    from opsrun.errors import ConfigError
    from opsrun.telemetry import Telemetry
    from opsrun.testing import ScriptedMainLlm

    def build(**kw):
        return Runner(catalog=OperationCatalog(), stores=InMemoryStores(),
                      main_llm=ScriptedMainLlm(), **kw)

    request = RunRequest(trigger="generate", chat_id="c", user_message="hi")
    result = anyio.run(build().run, request)
    assert result.run.status == "done", result.run.status
    try:
        build(telemetry=Telemetry())
    except ConfigError as exc:
        assert "opsrun[otel]" in exc.message, exc.message
    else:
        raise AssertionError("no ConfigError")
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m])
    assert loaded == [], loaded
    print("ok")
    """
)


def test_without_opentelemetry_a_runner_runs_and_telemetry_says_what_to_install() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENTELEMETRY],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"


def test_opsrun_loggers_skip_disabled_levels_and_say_where_they_were_called() -> None:
    handler = Records()
    logger = logging.getLogger("opsrun.test_run_logger")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    log = run_logger("opsrun.test_run_logger")
    try:
        log.debug("dropped")
        log.warning("careful %s", "now")
        try:
            raise KeyError("k")
        except KeyError:
            log.exception("it broke")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert handler.fields("opsrun.test_run_logger") == [
        ("careful now", "-", "-"),
        ("it broke", "-", "-"),
    ]
    assert {r.funcName for r in handler.records} == {
        "test_opsrun_loggers_skip_disabled_levels_and_say_where_they_were_called"
    }
    assert handler.records[1].exc_info is not None
