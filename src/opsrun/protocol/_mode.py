"""Which mode a user's message asks for: PLAN (think, read, propose) or APPLY (change files).

Decided in this order, first match wins:

1. a prefix: ``plan: …`` → PLAN, ``apply: …`` → APPLY (the text after it is the goal);
2. with a saved plan, a whole message that is an apply trigger (``ok``, ``ок``, ``apply``,
   ``применяй``, ``да``; case and trailing punctuation ignored) → APPLY that plan;
3. a word asking for a diagnosis (``fix``, ``исправь``, ``почини``…) → PLAN;
4. a word asking for new things (``create``, ``создай``…) → APPLY;
5. the configured default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ._driver_config import DriverConfig, DriverMode

__all__ = ["Route", "route"]

_PREFIX = re.compile(r"\s*(plan|apply)\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Route:
    """The mode of one message and why.

    Attributes:
        mode: ``plan`` or ``apply``.
        goal: The user's request without its prefix (empty for a bare trigger).
        reason: ``prefix``, ``trigger``, ``keyword`` or ``default``.
        use_saved_plan: APPLY carries on from the saved plan (its goal and context).
    """

    mode: DriverMode
    goal: str
    reason: Literal["prefix", "trigger", "keyword", "default"]
    use_saved_plan: bool


def route(message: str, *, has_saved_plan: bool, config: DriverConfig) -> Route:
    """Decide the mode of ``message`` (rules in the module docstring)."""
    prefix = _PREFIX.match(message)
    if prefix is not None:
        mode: DriverMode = "plan" if prefix.group(1).lower() == "plan" else "apply"
        goal = message[prefix.end() :].strip()
        return Route(mode, goal, "prefix", mode == "apply" and has_saved_plan)
    text = message.strip()
    bare = text.rstrip(".!").strip().casefold()
    if has_saved_plan and bare in {t.casefold() for t in config.apply_triggers}:
        return Route("apply", "", "trigger", True)
    words = {w.casefold() for w in _WORD.findall(text)}
    if words & {w.casefold() for w in config.plan_words}:
        return Route("plan", text, "keyword", False)
    if words & {w.casefold() for w in config.apply_words}:
        return Route("apply", text, "keyword", False)
    mode = config.default_mode
    return Route(mode, text, "default", mode == "apply" and has_saved_plan)
