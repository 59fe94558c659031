"""Resource limits of the Liquid sandbox."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

from ..._config import require

__all__ = ["TemplateCacheInfo", "TemplateLimits"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateLimits:
    """Resource limits applied to every parse and render; all are on by default.

    Attributes:
        max_source_length: Characters of template source accepted (also for partials).
        max_expression_length: Characters of one tag or output expression (of one line
            inside ``{% liquid %}``).
        block_nesting_limit: Depth of nested block tags accepted at parse time.
        context_depth_limit: Depth of ``include``/``render`` nesting (recursion guard).
        loop_iteration_limit: Iterations of one loop times those of its enclosing loops.
        max_total_loop_iterations: Iterations summed over every loop in one render.
        output_stream_limit: UTF-8 bytes of output, also bounding each ``capture``.
        local_namespace_limit: Size of ``assign``/``capture`` variables, as liquid
            measures it with ``sys.getsizeof``.
        max_string_length: Characters of any string a filter takes or returns, and the
            estimated size of text a filter builds from a collection.
        max_collection_length: Items of any list or range a filter takes or returns.
        max_integer_digits: Decimal digits of any integer a filter takes or returns.
        max_date_input: Characters of a string the ``date`` filter parses (parsing is
            slow per character and a date is short).
        timeout_seconds: Time budget of one parse and, separately, one render, in CPU
            time of the thread doing it (a busy machine does not fail a template).
    """

    max_source_length: int = 65_536
    max_expression_length: int = 4_096
    block_nesting_limit: int = 30
    context_depth_limit: int = 30
    loop_iteration_limit: int = 50_000
    max_total_loop_iterations: int = 100_000
    output_stream_limit: int = 2_000_000
    local_namespace_limit: int = 4_000_000
    max_string_length: int = 1_000_000
    max_collection_length: int = 50_000
    max_integer_digits: int = 1_000
    max_date_input: int = 256
    timeout_seconds: float = 0.5

    def __post_init__(self) -> None:
        """Reject non-positive limits.

        Raises:
            ConfigError: A limit is not a positive number.
        """
        for field in fields(self):
            value = getattr(self, field.name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            require(self, field.name, number and value > 0, "a positive number")


class TemplateCacheInfo(NamedTuple):
    """Parse-cache statistics, shaped like ``functools.lru_cache``'s ``cache_info()``."""

    hits: int
    misses: int
    maxsize: int
    currsize: int
