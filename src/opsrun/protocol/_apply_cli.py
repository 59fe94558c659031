"""``opsrun plan apply``, ``opsrun plan undo`` and ``opsrun plan recover``.

Exit codes: 0 applied (or the dry run would apply, or undo/recover finished),
1 the plan does not parse, is invalid, or failed to apply and was rolled back
(or undo/recover could not run), 2 usage errors (bad arguments, unreadable file),
128 + N when signal N (SIGINT, SIGTERM, SIGHUP) stopped the command: an apply is then
cancelled and rolled back (its check killed), an undo or recover runs to its end first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, TextIO

from opsrun.errors import ApplyError, OpsrunError

from ._apply import apply_plan
from ._cli_common import (
    error_violations,
    relocation_line,
    result_json,
    root_problem,
    violation_line,
)
from ._exit import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from ._journal import TransactionOutcome, recover, undo
from ._limits import Violation
from ._parse import parse_plan
from ._plan import ActionKind, Plan
from ._preview import preview_plan

__all__ = ["add_apply_commands"]

_DELETES = frozenset({ActionKind.DELETE_FILE, ActionKind.DELETE_DIR})


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
        "--check-timeout",
        type=_seconds,
        default=600.0,
        metavar="SECONDS",
        help="Check time limit (a positive number).",
    )
    apply.add_argument("--dry-run", action="store_true", help="Print the preview only.")
    apply.add_argument(
        "--allow-delete", action="store_true", help="Confirm DELETE_FILE / DELETE_DIR actions."
    )
    apply.add_argument("--protocol", type=int, choices=(1, 2), default=2, help="Protocol version.")
    apply.add_argument("--strict", action="store_true", help="The file must be one JSON document.")
    apply.add_argument(
        "--tolerance",
        choices=("exact", "whitespace", "loose"),
        default="exact",
        help="How sloppy a PATCH_FILE hunk may be; ambiguous hunks are always refused.",
    )
    apply.add_argument("--json", action="store_true", help="Print the result as JSON.")
    apply.set_defaults(func=_apply, handler=_apply)

    for name, helptext, handler in (
        ("undo", "Revert the last applied transaction.", _undo),
        ("recover", "Finish or revert an interrupted transaction.", _recover),
    ):
        sub = plan_subparsers.add_parser(name, help=helptext, description=helptext)
        sub.add_argument("--root", metavar="DIR", required=True, help="Project directory.")
        sub.set_defaults(func=handler, handler=handler)


def _seconds(value: str) -> float:
    """``--check-timeout``: a positive, finite number of seconds.

    Raises:
        argparse.ArgumentTypeError: anything else (``nan``, ``inf``, ``0``, ``-1``).
    """
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {value!r}")
    return seconds


def _read(name: str, stdin: TextIO) -> str | None:
    """The plan's text from ``name`` (``-``: stdin's bytes); None when it cannot be read
    or is not UTF-8."""
    try:
        if name == "-":
            buffer = getattr(stdin, "buffer", None)
            # Bytes, not stdin's own decoding: a strict UTF-8 stdin would raise mid-read.
            return stdin.read() if buffer is None else buffer.read().decode("utf-8")
        with open(name, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _printable(text: str) -> str:
    """``text`` safe for any UTF-8 output: a file name that is not UTF-8 (lone surrogates
    from the file system) shows its bytes as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _json_text(doc: Any) -> str:
    """``doc`` as indented JSON; non-ASCII stays readable unless a lone surrogate (a file
    name that is not UTF-8) needs an escape."""
    text = json.dumps(doc, ensure_ascii=False, indent=2)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(doc, indent=2)
    return text + "\n"


def _fail(out: TextIO, exc: OpsrunError, what: str, as_json: bool = False) -> int:
    violations = error_violations(exc)
    if as_json:
        doc = result_json(False, violations, outcome=what, error=exc.to_dict())
        out.write(_json_text(doc))
        return EXIT_FAILED
    out.write(_printable(f"{what}: {exc.code} {exc.message}\n"))
    for violation in violations:
        out.write(_printable(violation_line(violation) + "\n"))
    return EXIT_FAILED


_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


@contextlib.contextmanager
def _signals_to(stop: threading.Event) -> Iterator[list[int]]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP set ``stop`` instead of ending
    the process; yield the list of signals received (old handlers come back after).

    Off the main thread (where no handler can be installed) signals keep their effect.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    previous = {}
    try:
        for sig in _SIGNALS:
            previous[sig] = signal.signal(sig, handler)
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _interrupted(received: list[int], code: int) -> int:
    """``code``, or 128 + the first signal's number when one arrived (said on stderr)."""
    if not received:
        return code
    name = signal.Signals(received[0]).name
    sys.stderr.write(f"opsrun: interrupted by {name}\n")
    return 128 + received[0]


def _usage(problem: str) -> int:
    sys.stderr.write(f"opsrun: {problem}\n")
    return EXIT_USAGE


def _apply(
    args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    out = stdout or sys.stdout
    if (problem := root_problem(args.root)) is not None:
        return _usage(problem)
    text = _read(args.file, stdin or sys.stdin)
    if text is None:
        return _usage(f"cannot read {args.file} (missing, unreadable or not UTF-8)")
    try:
        check = shlex.split(args.check) if args.check else None
    except ValueError as exc:
        return _usage(f"--check: {exc}")
    try:
        plan = parse_plan(text, version=args.protocol, strict=args.strict)
        _confirm_deletes(plan, args.allow_delete)
        items = preview_plan(plan, args.root, tolerance=args.tolerance)
    except OpsrunError as exc:
        return _fail(out, exc, "invalid", args.json)
    if not args.json:
        for item in items:
            out.write(_printable(item.diff or f"{item.kind.value} {item.path}\n"))
            for hunk in item.relocated:
                out.write(_printable(relocation_line(item.path, hunk) + "\n"))
    if args.dry_run:
        if args.json:
            doc = result_json(True, [], outcome="dry_run", paths=[i.path for i in items])
            out.write(json.dumps(doc, indent=2) + "\n")
        else:
            out.write(f"dry run: {len(items)} path(s) would change\n")
        return EXIT_OK
    return _commit(args, plan, check, out)


def _commit(args: argparse.Namespace, plan: Plan, check: list[str] | None, out: TextIO) -> int:
    """Apply with SIGINT/SIGTERM/SIGHUP routed to the apply's ``stop``: the check is
    killed with its process group and the tree rolled back, as for any failure."""
    stop = threading.Event()
    with _signals_to(stop) as received:
        try:
            result = apply_plan(
                plan,
                args.root,
                check=check,
                allow_delete=args.allow_delete,
                check_timeout=args.check_timeout,
                tolerance=args.tolerance,
                stop=stop,
            )
        except ApplyError as exc:
            if exc.code == "ERR_ROLLBACK_FAILED" and not args.json:
                out.write("rollback did not finish: run `opsrun plan recover --root DIR`\n")
            return _interrupted(received, _fail(out, exc, "not applied", args.json))
    # A signal after the commit changes nothing: the plan is applied, and said so.
    if args.json:
        doc = result_json(True, [], outcome="applied", **result.model_dump())
        out.write(_json_text(doc))
        return EXIT_OK
    if (recovered := result.recovered) is not None:
        out.write(f"recovered first: {recovered.outcome} ({recovered.tx_id})\n")
        _notes(out, recovered)
    if result.check_output:
        out.write(result.check_output.rstrip("\n") + "\n")
    out.write(f"applied: {len(result.changed)} path(s), transaction {result.tx_id}\n")
    return EXIT_OK


def _confirm_deletes(plan: Plan, allowed: bool) -> None:
    """Refuse deletes the user did not confirm, before any diff is printed."""
    deletes = [(i, a) for i, a in enumerate(plan.actions) if a.kind in _DELETES]
    if not deletes or allowed:
        return
    raise ApplyError(
        f"the plan deletes {len(deletes)} path(s); pass --allow-delete to confirm",
        code="ERR_DELETE_NOT_CONFIRMED",
        details={
            "violations": [
                Violation(
                    code="ERR_DELETE_NOT_CONFIRMED",
                    message=f"{a.kind.value} needs --allow-delete",
                    path=a.path,
                    action_index=i,
                ).model_dump()
                for i, a in deletes
            ]
        },
    )


def _undo(
    args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    out = stdout or sys.stdout
    if (problem := root_problem(args.root)) is not None:
        return _usage(problem)
    # A signal waits for the undo to end: cut short, it would leave the journal to recover.
    with _signals_to(threading.Event()) as received:
        try:
            outcome = undo(args.root)
        except ApplyError as exc:
            return _interrupted(received, _fail(out, exc, "not undone"))
    out.write(f"undone: transaction {outcome.tx_id}\n")
    _notes(out, outcome)
    return _interrupted(received, EXIT_OK)


def _recover(
    args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    out = stdout or sys.stdout
    if (problem := root_problem(args.root)) is not None:
        return _usage(problem)
    with _signals_to(threading.Event()) as received:
        try:
            outcome = recover(args.root)
        except ApplyError as exc:
            return _interrupted(received, _fail(out, exc, "not recovered"))
    out.write(f"recover: {outcome.outcome}" + (f" ({outcome.tx_id})\n" if outcome.tx_id else "\n"))
    _notes(out, outcome)
    return _interrupted(received, EXIT_OK)


def _notes(out: TextIO, outcome: TransactionOutcome) -> None:
    """What the rollback could not give back exactly, one ``note:`` line each."""
    for path in outcome.kept:
        out.write(
            _printable(
                f"note: {path!r} left in place: it holds what the transaction did not write\n"
            )
        )
    for path in outcome.not_restored:
        saved = f"; its old content is in {outcome.saved_to!r}" if outcome.saved_to else ""
        out.write(
            _printable(
                f"note: {path!r} not restored: what is there now was not written by the "
                f"transaction{saved}\n"
            )
        )
    for path in outcome.setid_cleared:
        out.write(_printable(f"note: {path!r} restored without its setuid/setgid bits\n"))
