"""Checking one answer of the model: parse, validate, preview; and what a failure means
(repair, fall back to v1, or go back to PLAN because a file changed on disk)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsrun.errors import OpsrunError, PlanError

from ._context import FileBlock, read_file_block
from ._driver_config import DriverConfig
from ._driver_parts import (
    ANSWERED_BY_REFUSAL,
    FALLBACK_AFTER_REPAIR,
    FALLBACK_AT_ONCE,
    Accepted,
    Rejected,
    Round,
    violation,
    violations_of,
)
from ._events import PlanEvent
from ._gather import Gatherer
from ._limits import Violation
from ._parse import parse_plan
from ._plan import ActionKind, Plan
from ._preview import preview_plan
from ._trace import TraceBuilder
from ._validate import NO_CHANGES_PREFIX, read_key, validate_plan

__all__ = ["AnswerCheck", "shown_in_part"]


def shown_in_part(plan: Plan, round_: Round) -> list[Violation]:
    """``ERR_FILE_SHOWN_IN_PART`` for each UPDATE_FILE of a file the model saw only in part.

    A whole-file UPDATE_FILE written from a range, or from a text the diet cut, would
    delete the lines the model never saw. Never raises.
    """
    partial = {read_key(path) for path in round_.partial}
    if not partial:
        return []
    return [
        Violation(
            code="ERR_FILE_SHOWN_IN_PART",
            message=f"{action.path} was shown only in part; replacing it whole would delete "
            "the lines not shown",
            path=action.path,
            action_index=index,
        )
        for index, action in enumerate(plan.actions)
        if action.kind is ActionKind.UPDATE_FILE and read_key(action.path) in partial
    ]


@dataclass(slots=True, kw_only=True)
class AnswerCheck:
    """Checks answers for one turn against the project at ``root``."""

    root: Path
    cfg: DriverConfig
    trace: TraceBuilder
    gather: Gatherer
    emit: Callable[..., Any]
    sink: Callable[[PlanEvent], None]

    def check(
        self, answer: str, round_: Round, version: int, fallback_possible: bool
    ) -> Accepted | Rejected:
        """Parse, validate and (in APPLY) preview one answer."""
        lim = self.cfg.limits
        # The turn falls back to v1 at most once (here at the schema stage, or later).
        fallback_possible = fallback_possible and not self.trace["protocol_fallback_attempted"]
        # Best-effort parsing always: a provider's enforced format yields bare JSON anyway,
        # and local validation runs in every case.
        try:
            plan = parse_plan(answer, version=version, limits=lim, eol=self.cfg.normalize_eol)
        except PlanError as exc:
            other = self.other_version(answer, version, fallback_possible)
            if other is None:
                problems = violations_of(exc) or (violation(exc.code, exc.message),)
                return Rejected(exc.code, exc.message, "schema", problems)
            self.trace["protocol_fallback_attempted"] = True
            self.trace["protocol_fallback_reason"] = exc.code
            self.trace["protocol_fallback_stage"] = "schema"
            self.trace.add("protocol_attempts", other.version)
            self.emit(
                "PROTOCOL_FALLBACK",
                **{"from": f"v{version}", "to": f"v{other.version}"},
                reason=exc.code,
                stage="schema",
            )
            plan = other
        if (
            round_.mode == "apply"
            and not plan.actions
            and round_.rounds_left > 0
            and self.gather.new(plan.context_requests)
            and not (plan.summary or "").startswith(NO_CHANGES_PREFIX)
        ):
            return Accepted(plan, more_context=True)
        read_paths = tuple(round_.shown) if round_.mode == "apply" else None
        found = validate_plan(
            plan,
            mode=round_.mode,
            root=self.root,
            read_paths=read_paths,
            limits=lim,
            policy=self.cfg.policy,
        )
        if round_.mode == "apply":  # the root cause first: it names the repair
            found = shown_in_part(plan, round_) + found
        # A bad context request is answered with a REFUSED line, not a repair round.
        blocking = tuple(v for v in found if v.blocking and v.code not in ANSWERED_BY_REFUSAL)
        if blocking:
            return self.rejected(blocking, "validate", round_, plan.version, fallback_possible)
        if round_.mode == "plan" or not plan.actions:
            return Accepted(plan)
        try:
            items = preview_plan(
                plan,
                self.root,
                read_paths=read_paths,
                limits=lim,
                policy=self.cfg.policy,
                events=self.sink,
                tolerance=self.cfg.patch_tolerance,
            )
        except OpsrunError as exc:
            problems = violations_of(exc) or (Violation(code=exc.code, message=exc.message),)
            return self.rejected(problems, "preview", round_, plan.version, fallback_possible)
        self.trace["preview"] = [{"path": i.path, "kind": i.kind.value} for i in items]
        return Accepted(plan, tuple(items))

    def rejected(
        self,
        problems: tuple[Violation, ...],
        stage: str,
        round_: Round,
        version: int,
        fallback_possible: bool,
    ) -> Rejected:
        first = problems[0]
        codes = [v.code for v in problems]
        if "ERR_BASE_MISMATCH" in codes and self.changed_on_disk(problems, round_):
            hit = next(v for v in problems if v.code == "ERR_BASE_MISMATCH")
            return Rejected(
                "ERR_BASE_MISMATCH",
                f"{hit.path} changed since it was read; plan again",
                stage,
                problems,
                back_to_plan=True,
            )
        if fallback_possible and version == 2:
            for code in codes:
                if code in FALLBACK_AT_ONCE or code in FALLBACK_AFTER_REPAIR:
                    hit = next(v for v in problems if v.code == code)
                    return Rejected(code, hit.message, stage, problems, fallback=True)
        return Rejected(first.code, first.message, stage, problems)

    def changed_on_disk(self, problems: Sequence[Violation], round_: Round) -> bool:
        """True when a file's hash now differs from the hash the model was shown."""
        for v in problems:
            if v.code != "ERR_BASE_MISMATCH" or v.path is None or v.path not in round_.shown:
                continue
            block = read_file_block(
                self.root, v.path, policy=self.cfg.policy, limits=self.cfg.limits,
                max_bytes=self.cfg.max_file_bytes,
            )  # fmt: skip
            if not isinstance(block, FileBlock) or block.sha256 != round_.shown[v.path]:
                return True
        return False

    def other_version(self, answer: str, version: int, fallback_possible: bool) -> Plan | None:
        """The answer parsed as the other protocol version, when fallback allows it."""
        if not fallback_possible:
            return None
        try:
            return parse_plan(
                answer,
                version=1 if version == 2 else 2,
                limits=self.cfg.limits,
                eol=self.cfg.normalize_eol,
            )
        except PlanError:
            return None
