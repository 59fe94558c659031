"""``opsrun plan apply``, ``opsrun plan undo`` and ``opsrun plan recover``.

Exit codes: 0 applied (or the dry run would apply, or undo/recover finished),
1 the plan does not parse, is invalid, or failed to apply and was rolled back
(or undo/recover could not run), 2 usage errors (bad arguments, unreadable file).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any, TextIO

from opsrun.errors import ApplyError, OpsrunError

from ._apply import apply_plan
from ._exit import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from ._journal import recover, undo
from ._parse import parse_plan
from ._preview import preview_plan

__all__ = ["add_apply_commands"]


def add_apply_commands(plan_subparsers: Any) -> None:
    """Register ``apply``, ``undo`` and ``recover`` under ``opsrun plan``.

    Args:
        plan_subparsers: The ``_SubParsersAction`` of the ``plan`` command. Each new
            sub-parser sets ``func`` (and ``handler``) to a callable
            ``(args, stdin=None, stdout=None) -> int`` returning the exit code.
    """
    apply = plan_subparsers.add_parser(
        "apply",
        help="Preview and apply a plan to a directory, transactionally.",
        description="Print the diff of every touched file, apply the plan, run the check; "
        "roll everything back if anything fails.",
    )
    apply.add_argument("file", metavar="FILE", help="The LLM answer; '-' reads stdin.")
    apply.add_argument("--root", metavar="DIR", required=True, help="Project directory.")
    apply.add_argument("--check", metavar="CMD", help="Command run in DIR after applying.")
    apply.add_argument(
        "--check-timeout", type=float, default=600.0, metavar="SECONDS", help="Check time limit."
    )
    apply.add_argument("--dry-run", action="store_true", help="Print the preview only.")
    apply.add_argument(
        "--allow-delete", action="store_true", help="Confirm DELETE_FILE / DELETE_DIR actions."
    )
    apply.add_argument("--version", type=int, choices=(1, 2), default=2, help="Protocol version.")
    apply.add_argument("--strict", action="store_true", help="The file must be one JSON document.")
    apply.set_defaults(func=_apply, handler=_apply)

    for name, helptext, handler in (
        ("undo", "Revert the last applied transaction.", _undo),
        ("recover", "Finish or revert an interrupted transaction.", _recover),
    ):
        sub = plan_subparsers.add_parser(name, help=helptext, description=helptext)
        sub.add_argument("--root", metavar="DIR", required=True, help="Project directory.")
        sub.set_defaults(func=handler, handler=handler)


def _read(name: str, stdin: TextIO) -> str | None:
    if name == "-":
        return stdin.read()
    try:
        with open(name, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _fail(out: TextIO, exc: OpsrunError, what: str) -> int:
    out.write(f"{what}: {exc.code} {exc.message}\n")
    for violation in exc.details.get("violations", [])[1:]:
        if isinstance(violation, dict):
            out.write(f"  also: {violation.get('code')} {violation.get('message')}\n")
    return EXIT_FAILED


def _apply(
    args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    out = stdout or sys.stdout
    text = _read(args.file, stdin or sys.stdin)
    if text is None:
        sys.stderr.write(f"opsrun: cannot read {args.file}\n")
        return EXIT_USAGE
    try:
        check = shlex.split(args.check) if args.check else None
    except ValueError as exc:
        sys.stderr.write(f"opsrun: --check: {exc}\n")
        return EXIT_USAGE
    try:
        plan = parse_plan(text, version=args.version, strict=args.strict)
        items = preview_plan(plan, args.root)
    except OpsrunError as exc:
        return _fail(out, exc, "invalid")
    for item in items:
        out.write(item.diff or f"{item.kind.value} {item.path}\n")
    if args.dry_run:
        out.write(f"dry run: {len(items)} path(s) would change\n")
        return EXIT_OK
    try:
        result = apply_plan(
            plan,
            args.root,
            check=check,
            allow_delete=args.allow_delete,
            check_timeout=args.check_timeout,
        )
    except ApplyError as exc:
        if exc.code == "ERR_ROLLBACK_FAILED":
            out.write("rollback did not finish: run `opsrun plan recover --root DIR`\n")
        return _fail(out, exc, "not applied")
    if result.check_output:
        out.write(result.check_output.rstrip("\n") + "\n")
    out.write(f"applied: {len(result.changed)} path(s), transaction {result.tx_id}\n")
    return EXIT_OK


def _undo(
    args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    out = stdout or sys.stdout
    try:
        outcome = undo(args.root)
    except ApplyError as exc:
        return _fail(out, exc, "not undone")
    out.write(f"undone: transaction {outcome.tx_id}\n")
    return EXIT_OK


def _recover(
    args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    out = stdout or sys.stdout
    try:
        outcome = recover(args.root)
    except ApplyError as exc:
        return _fail(out, exc, "not recovered")
    out.write(f"recover: {outcome.outcome}" + (f" ({outcome.tx_id})\n" if outcome.tx_id else "\n"))
    return EXIT_OK
