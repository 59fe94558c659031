"""The ``opsrun`` command line.

``opsrun --version`` prints ``opsrun <version>``.

``opsrun plan check FILE [--root DIR]`` parses and validates an LLM plan answer; with
``--root`` it also runs everything ``plan apply`` runs short of writing, so it reports
the codes apply would. Exit codes: 0 when the plan is valid (warnings allowed), 1 when
it has violations or does not parse, 2 for usage errors (bad arguments, unreadable file,
a ``--root`` that is not a directory).

``opsrun plan apply FILE --root DIR``, ``plan undo`` and ``plan recover`` apply a
plan to a directory transactionally (exit codes in docs/apply.md).

``opsrun plan turn --root DIR --model M MESSAGE`` runs one turn of the plan driver
against an OpenAI-compatible model; ``opsrun plan report --root DIR`` prints the
fallback metrics of its traces (docs/driver.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any, TextIO

from opsrun._cli_driver import add_driver_commands
from opsrun.errors import OpsrunError, PlanError
from opsrun.protocol import ActionKind, Plan, Violation, parse_plan, preview_plan, validate_plan
from opsrun.protocol._apply_cli import add_apply_commands
from opsrun.protocol._cli_common import (
    error_violations,
    relocation_line,
    result_json,
    root_problem,
    violation_line,
)
from opsrun.protocol._exit import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

__all__ = ["build_parser", "main"]

_DELETES = frozenset({ActionKind.DELETE_FILE, ActionKind.DELETE_DIR})


class _UsageError(Exception):
    pass


class _VersionRequested(Exception):
    pass


class _VersionAction(argparse.Action):
    """``--version``: stop parsing so that :func:`main` prints the version to its stdout."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        raise _VersionRequested


def _version() -> str:
    try:
        return metadata.version("opsrun")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports usage errors instead of exiting the process."""

    def error(self, message: str) -> Any:  # argparse's signature is NoReturn
        raise _UsageError(f"{self.prog}: error: {message}")


def build_parser() -> tuple[argparse.ArgumentParser, Any]:
    """Return the top-level parser and the ``plan`` sub-command group.

    The second value is the ``_SubParsersAction`` of ``opsrun plan``, so more
    ``plan`` sub-commands can be added to it.
    """
    parser = _Parser(prog="opsrun", description="opsrun command line tools.")
    parser.add_argument(
        "--version", action=_VersionAction, help="Print the opsrun version and exit."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    plan = commands.add_parser("plan", help="Work with LLM edit plans.")
    plan_commands = plan.add_subparsers(dest="plan_command", metavar="SUBCOMMAND")
    plan_commands.required = True
    check = plan_commands.add_parser(
        "check", help="Parse and validate a plan answer.", description="Parse and validate."
    )
    check.add_argument("file", metavar="FILE", help="The LLM answer to check; '-' reads stdin.")
    check.add_argument("--protocol", type=int, choices=(1, 2), default=2, help="Protocol version.")
    check.add_argument("--mode", choices=("plan", "apply"), default="apply", help="PLAN or APPLY.")
    check.add_argument(
        "--strict", action="store_true", help="The whole file must be one JSON document."
    )
    check.add_argument(
        "--root",
        metavar="DIR",
        help="Project directory: also run what apply runs short of writing (file rules, "
        "patch placement, the delete confirmation).",
    )
    check.add_argument(
        "--allow-delete", action="store_true", help="Confirm DELETE_FILE / DELETE_DIR actions."
    )
    check.add_argument("--json", action="store_true", help="Print the result as JSON.")
    check.set_defaults(handler=_plan_check)
    add_apply_commands(plan_commands)
    add_driver_commands(plan_commands)
    return parser, plan_commands


def _read_input(name: str, stdin: TextIO) -> str | bytes:
    """The answer from ``name`` (``-``: stdin): its bytes where they can be had, so bad
    UTF-8 reaches the parser to report (``ERR_INVALID_JSON``, "not valid UTF-8 at byte …").

    Raises:
        _UsageError: the file cannot be read.
    """
    if name == "-":
        buffer = getattr(stdin, "buffer", None)
        if buffer is not None:
            return bytes(buffer.read())  # a strict UTF-8 stdin would raise mid-read
        try:
            return stdin.read()
        except UnicodeDecodeError as exc:
            raise _UsageError(f"opsrun: cannot read standard input: {exc}") from exc
    try:
        with open(name, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise _UsageError(f"opsrun: cannot read {name}: {exc.strerror or exc}") from exc


def _plan_check(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    if args.root is not None and (problem := root_problem(args.root)) is not None:
        raise _UsageError(f"opsrun: {problem}")
    text = _read_input(args.file, stdin)
    result: dict[str, Any] = {"file": args.file, "protocol": args.protocol, "mode": args.mode}
    try:
        plan = parse_plan(text, version=args.protocol, strict=args.strict)
    except PlanError as exc:
        result["error"] = exc.to_dict()
        return _report(stdout, args.json, [], error_violations(exc), result)
    result["repairs"] = list(plan.repairs)
    violations = validate_plan(plan, mode=args.mode, root=args.root)
    if args.root is not None and args.mode == "apply" and not any(v.blocking for v in violations):
        violations += _what_apply_would_refuse(plan, args.root, args.allow_delete, result)
    return _report(stdout, args.json, plan.actions, violations, result)


def _what_apply_would_refuse(
    plan: Plan, root: str, allow_delete: bool, result: dict[str, Any]
) -> list[Violation]:
    """Everything ``plan apply`` checks beyond validation, short of writing; hunks that
    would not apply exactly at their stated line go to ``result["relocated"]``."""
    found: list[Violation] = []
    deletes = [(i, a) for i, a in enumerate(plan.actions) if a.kind in _DELETES]
    if deletes and not allow_delete:
        found += [
            Violation(
                code="ERR_DELETE_NOT_CONFIRMED",
                message=f"{a.kind.value} needs --allow-delete (the user's confirmation)",
                path=a.path,
                action_index=i,
            )
            for i, a in deletes
        ]
    try:
        items = preview_plan(plan, root)  # patch placement, base hashes, links: as apply does
    except OpsrunError as exc:
        found += error_violations(exc)
        return found
    result["relocated"] = [relocation_line(i.path, h) for i in items for h in i.relocated]
    return found


def _report(
    out: TextIO,
    as_json: bool,
    actions: Sequence[object],
    violations: list[Violation],
    result: dict[str, Any],
) -> int:
    ok = not any(v.blocking for v in violations)
    if as_json:
        doc = result_json(ok, violations, **result, actions=len(actions))
        out.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
    else:
        for repair in result.get("repairs", ()):
            out.write(f"repaired: {repair}\n")
        for note in result.get("relocated", ()):
            out.write(note + "\n")
        for v in violations:
            out.write(violation_line(v) + "\n")
        status = "valid" if ok else "invalid"
        out.write(f"{status}: {len(actions)} actions, {len(violations)} findings\n")
    return EXIT_OK if ok else EXIT_FAILED


def main(
    argv: list[str] | None = None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the ``opsrun`` command and return its exit code (0 ok, 1 failed, 2 usage,
    130 interrupted by Ctrl-C; an apply, undo or recover stopped by a signal returns
    128 + its number after rolling back or finishing)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser, _ = build_parser()
    try:
        args = parser.parse_args(argv)
        code: int = args.handler(args, stdin or sys.stdin, out)
    except _VersionRequested:
        out.write(f"opsrun {_version()}\n")
        return EXIT_OK
    except _UsageError as exc:
        err.write(parser.format_usage() if "required" in str(exc) else "")
        err.write(f"{exc}\n")
        return EXIT_USAGE
    except SystemExit as exc:  # --help from argparse
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        # Outside an apply, undo or recover (which finish or roll back first, see
        # docs/apply.md) nothing is half-written: say so, no traceback.
        err.write("opsrun: interrupted\n")
        return EXIT_INTERRUPTED
    return code


if __name__ == "__main__":
    sys.exit(main())
