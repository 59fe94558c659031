"""``opsrun plan turn`` (one driver turn against a model) and ``opsrun plan report``.

``plan turn`` talks to any OpenAI-compatible endpoint through
:class:`opsrun.providers.openai.OpenAIProvider` (``pip install 'opsrun[openai]'``) and
keeps the plan between turns in ``<root>/.opsrun/driver/plan.json``, so
``opsrun plan turn --root . "plan: fix the import"`` followed by
``opsrun plan turn --root . ok`` applies the plan. Exit codes: 0 planned, applied or
nothing to change; 1 the turn failed; 2 usage errors, a damaged state file
(``plan.json``, ``project.json``: its code and path are printed) or one that cannot be
written.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio

from opsrun.errors import ConfigError
from opsrun.protocol import (
    DriverConfig,
    DriverResult,
    FilePlanState,
    PlanDriver,
    fallback_metrics,
    load_traces,
)
from opsrun.protocol._cli_common import root_problem, violation_line
from opsrun.protocol._exit import EXIT_FAILED, EXIT_OK, EXIT_USAGE

__all__ = ["STATE_FILE", "add_driver_commands"]

STATE_FILE = Path(".opsrun") / "driver" / "plan.json"
"""Where ``plan turn`` keeps the saved plan, relative to the root."""


class UsageProblem(Exception):
    """A user error the CLI reports with exit code 2 and no traceback."""


def add_driver_commands(plan_subparsers: Any) -> None:
    """Register ``turn`` and ``report`` under ``opsrun plan``."""
    turn = plan_subparsers.add_parser(
        "turn",
        help="Send one message to the plan driver (PLAN or APPLY) with a real model.",
        description="Route MESSAGE to PLAN or APPLY, ask the model, validate, repair, "
        "and in APPLY preview and apply the change. Needs opsrun[openai].",
    )
    turn.add_argument("message", metavar="MESSAGE", help="e.g. 'plan: fix the import', 'ok'.")
    turn.add_argument("--root", metavar="DIR", required=True, help="Project directory.")
    turn.add_argument(
        "--model",
        default=os.environ.get("OPSRUN_OPENAI_MODEL"),
        help="Model name (default: $OPSRUN_OPENAI_MODEL).",
    )
    turn.add_argument(
        "--base-url",
        default=os.environ.get("OPSRUN_OPENAI_BASE_URL"),
        help="OpenAI-compatible API root (default: $OPSRUN_OPENAI_BASE_URL, else OpenAI). "
        "The key is read from $OPENAI_API_KEY.",
    )
    turn.add_argument("--protocol", type=int, choices=(1, 2), default=2, help="Protocol first.")
    turn.add_argument("--no-fallback", action="store_true", help="Never fall back to v1.")
    turn.add_argument(
        "--best-effort", action="store_true", help="Send no response_format; parse leniently."
    )
    turn.add_argument("--check", metavar="CMD", help="Command run in DIR after applying.")
    turn.add_argument(
        "--allow-delete", action="store_true", help="Confirm DELETE_FILE / DELETE_DIR actions."
    )
    turn.add_argument("--timeout", type=float, default=90.0, help="Seconds per model call.")
    turn.add_argument("--trace", action="store_true", help="Write .opsrun/traces/<id>.json.")
    turn.add_argument("--json", action="store_true", help="Print the result as JSON.")
    turn.set_defaults(handler=_turn)

    report = plan_subparsers.add_parser(
        "report",
        help="Fallback metrics over the traces in DIR/.opsrun/traces.",
        description="Fallback rate (with and without non-UTF-8 files), reasons, stages, "
        "and whether protocol v2 may become the only one.",
    )
    report.add_argument("--root", metavar="DIR", required=True, help="Project directory.")
    report.add_argument("--window", type=int, default=100, help="Newest APPLY turns counted.")
    report.add_argument("--json", action="store_true", help="Print the metrics as JSON.")
    report.set_defaults(handler=_report)


def _turn(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    try:
        return anyio.run(_turn_async, args, stdout)
    except UsageProblem as exc:
        sys.stderr.write(f"opsrun: {exc}\n")
        return EXIT_USAGE


def _root(value: str) -> Path:
    problem = root_problem(value)
    if problem is not None:
        raise UsageProblem(problem)
    return Path(value)


async def _turn_async(args: argparse.Namespace, out: TextIO) -> int:
    root = _root(args.root)
    if not args.model:
        raise UsageProblem("name the model with --model or $OPSRUN_OPENAI_MODEL")
    try:
        from opsrun.providers.openai import OpenAIProvider
    except ImportError as exc:
        raise UsageProblem(
            "plan turn needs the OpenAI-compatible adapter: pip install 'opsrun[openai]'"
        ) from exc
    try:
        check = shlex.split(args.check) if args.check else None
        config = DriverConfig(
            protocol_version=args.protocol,
            fallback_to_v1=not args.no_fallback,
            strict_json=not args.best_effort,
            check=check,
            allow_delete=args.allow_delete,
            timeout=args.timeout,
            write_traces=args.trace,
        )
    except (ValueError, ConfigError) as exc:
        raise UsageProblem(str(exc)) from exc
    async with OpenAIProvider(args.model, base_url=args.base_url) as provider:
        try:
            driver = PlanDriver(
                provider=provider,
                model=args.model,
                root=root,
                config=config,
                state=FilePlanState(root / STATE_FILE),
            )
            result = await driver.turn(args.message)
        except ConfigError as exc:  # a damaged plan.json or project.json, a bad root
            raise UsageProblem(_state_problem(exc)) from exc
        except OSError as exc:  # a state file that cannot be written (a linked .opsrun)
            raise UsageProblem(f"{exc.strerror or exc}: {exc.filename or root}") from exc
    if args.json:
        out.write(json.dumps(_as_json(result), ensure_ascii=False, indent=2) + "\n")
    else:
        _print(result, out, args.root)
    return EXIT_FAILED if result.status == "failed" else EXIT_OK


def _state_problem(exc: ConfigError) -> str:
    """One line for a ConfigError: its code, the file at fault, and what to do."""
    path = exc.details.get("path")
    first = exc.message.splitlines()[0] if exc.message else exc.code
    if path is None:
        return f"[{exc.code}] {first[:300]}"
    first = first.removeprefix(str(path)).lstrip(": ")
    return f"[{exc.code}] {path}: {first[:300]} (fix or delete the file)"


def _as_json(result: DriverResult) -> dict[str, Any]:
    return {
        "mode": result.mode,
        "status": result.status,
        "error_code": result.error_code,
        "error_message": result.error_message,
        "trace_id": result.trace_id,
        "next_mode": result.next_mode,
        "plan": result.plan.model_dump(mode="json") if result.plan is not None else None,
        "violations": [v.model_dump() for v in result.violations],
        "preview": [item.model_dump(mode="json") for item in result.preview],
        "applied": result.applied.model_dump() if result.applied is not None else None,
    }


def _print(result: DriverResult, out: TextIO, root: str) -> None:
    out.write(f"{result.mode}: {result.status} (trace {result.trace_id})\n")
    plan = result.plan
    if result.status == "failed":
        out.write(f"failed: {result.error_code} {result.error_message}\n")
        for v in result.violations:
            out.write(violation_line(v) + "\n")
        if result.next_mode == "plan":
            out.write("a file changed since it was read: send 'ok' to retry the saved plan\n")
        return
    if plan is not None and plan.summary:
        out.write(plan.summary.rstrip("\n") + "\n")
    if result.status == "planned" and plan is not None:
        for request in plan.context_requests:
            target = request.path or request.query or request.source or ""
            out.write(f"  wants {request.type} {target}\n".rstrip() + "\n")
        out.write("reply 'ok' to apply this plan\n")
    for item in result.preview:
        out.write(item.diff or f"{item.kind.value} {item.path}\n")
    if result.applied is not None:
        if result.applied.check_output:
            out.write(result.applied.check_output.rstrip("\n") + "\n")
        out.write(
            f"applied: {len(result.applied.changed)} path(s), transaction "
            f"{result.applied.tx_id}; undo with: opsrun plan undo --root {shlex.quote(root)}\n"
        )


def _report(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    try:
        root = _root(args.root)
    except UsageProblem as exc:
        sys.stderr.write(f"opsrun: {exc}\n")
        return EXIT_USAGE
    if args.window < 1:
        sys.stderr.write("opsrun: --window must be at least 1\n")
        return EXIT_USAGE
    traces, unreadable = load_traces(root)
    metrics = fallback_metrics(traces, window=args.window)
    if args.json:
        doc = metrics.to_dict() | {"traces": len(traces), "unreadable": unreadable}
        stdout.write(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK
    stdout.write(
        f"traces: {len(traces)} ({unreadable} unreadable); APPLY turns counted: "
        f"{metrics.apply_count} (window {metrics.window})\n"
        f"fallback_count: {metrics.fallback_count}\n"
        f"fallback_rate: {metrics.fallback_rate:.2%}\n"
        f"fallback_rate_excluding_non_utf8: {metrics.fallback_rate_excluding_non_utf8:.2%}\n"
    )
    for reason, count in sorted(metrics.by_reason.items()):
        stdout.write(f"  reason {reason}: {count}\n")
    for stage, count in sorted(metrics.by_stage.items()):
        stdout.write(f"  stage {stage}: {count}\n")
    stdout.write(
        f"ERR_PATCH_APPLY_FAILED: {metrics.patch_apply_failed} turns, "
        f"{metrics.patch_apply_repaired} repaired, {metrics.patch_apply_fallbacks} fell back\n"
    )
    if metrics.ready_for_v2_only:
        stdout.write("v2 only: ready (every criterion holds)\n")
    else:
        stdout.write("v2 only: not yet\n")
        for reason in metrics.unmet:
            stdout.write(f"  - {reason}\n")
    return EXIT_OK
