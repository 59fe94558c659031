"""Sandboxed Liquid rendering for ``template`` and ``llm`` operations (python-liquid 2).

Templates see plain data (``art``, ``chatHistory``, ``run`` and any extra keys the
caller passes) and cannot reach the file system unless the host hands in a loader.
python-liquid 2 leaves loop iterations, output size and local namespace size
unlimited by default, so every engine runs with :class:`TemplateLimits`: liquid's
own limits where they exist, plus source length, total loop iterations, string,
collection and integer sizes for filters, and a cooperative wall-clock budget
checked on every variable lookup, filter call, loop iteration, block and write.

Every failure, whatever its origin, leaves :meth:`TemplateEngine.render` as a
:class:`~opsrun.errors.TemplateError` with code ``template_render_error``.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal
from functools import wraps
from io import StringIO
from time import monotonic, thread_time
from typing import Any, TextIO, cast

from liquid import BoundTemplate, Environment, Mode, RenderContext, StrictUndefined, Undefined
from liquid.ast import Node
from liquid.builtin.expressions import LoopExpression, StringLiteral
from liquid.builtin.tags.for_tag import ForLoop, ForNode, ForTag
from liquid.builtin.tags.tablerow_tag import TablerowNode, TablerowTag
from liquid.exceptions import (
    BlockNestingError,
    ContextDepthError,
    FilterArgumentError,
    LiquidError,
    LiquidSyntaxError,
    LiquidValueError,
    LocalNamespaceLimitError,
    LoopIterationLimitError,
    OutputStreamLimitError,
    ResourceLimitError,
    TemplateNotFoundError,
    UndefinedError,
)
from liquid.expression import Expression
from liquid.loader import BaseLoader
from liquid.output import LimitedStringIO
from liquid.parser import get_parser
from liquid.span import Span
from liquid.stream import TokenStream
from liquid.token import TOKEN_EOF, TOKEN_EXPRESSION, TOKEN_TAG, Token
from liquid.undefined import UNDEFINED

from ...errors import ConfigError, TemplateError, bound_text
from ._filters import last, strip_html_filter, transcript, uniq
from ._limits import TemplateCacheInfo, TemplateLimits

__all__ = ["TemplateEngine"]


# --- limit errors and the per-render budget ----------------------------------------


class _RenderLimitError(ResourceLimitError):
    """A limit opsrun adds on top of liquid's own was exceeded."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(f"{message} (limit {limit})", token=None)
        self.limit = limit


class _FilterLimitError(FilterArgumentError):
    """A filter limit was exceeded; liquid attaches the filter's token to this type."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(f"{message} (limit {limit})", token=None)
        self.limit = limit


_LIQUID_LIMITS: dict[type[LiquidError], str] = {
    LoopIterationLimitError: "loop_iteration_limit",
    OutputStreamLimitError: "output_stream_limit",
    LocalNamespaceLimitError: "local_namespace_limit",
    ContextDepthError: "context_depth_limit",
    BlockNestingError: "block_nesting_limit",
}


class _Clock:
    """The time budget of one parse or render: CPU time of the thread doing it.

    A render never yields, so its thread's CPU time is what the template costs; time the
    machine spent on other work does not count. Reading that clock is a system call, so
    the wall clock is checked instead, and the CPU clock only once the wall clock says
    the budget may be spent (CPU time never runs ahead of wall time).
    """

    __slots__ = ("budget", "deadline", "started")

    def __init__(self, seconds: float) -> None:
        self.budget = seconds
        self.started = thread_time()
        self.deadline = monotonic() + seconds
        """When the budget may be spent, on the wall clock."""

    def spent(self, now: float) -> bool:
        """True once the budget is spent, ``now`` being the wall clock past ``deadline``."""
        left = self.budget - (thread_time() - self.started)
        if left <= 0:
            return True
        self.deadline = now + left
        return False


class _Budget:
    """Mutable per-render state: the time budget, loop count and memoised data weights."""

    __slots__ = ("clock", "iterations", "limits", "weights")

    def __init__(self, limits: TemplateLimits) -> None:
        self.limits = limits
        self.clock = _Clock(limits.timeout_seconds)
        self.iterations = 0
        # id -> (object, weight); holding the object keeps its id from being reused.
        self.weights: dict[int, tuple[object, int]] = {}


# A context variable rather than an attribute: filters never see the render context.
_ACTIVE: ContextVar[_Budget | None] = ContextVar("opsrun_liquid_budget", default=None)


def _tick() -> None:
    budget = _ACTIVE.get()
    if budget is None:
        return
    now = monotonic()
    if now > budget.clock.deadline and budget.clock.spent(now):
        raise _RenderLimitError(
            "timeout_seconds", f"render took longer than {budget.limits.timeout_seconds}s"
        )


class _TickingIterator:
    """Wraps a loop's iterator so each iteration checks the deadline."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Iterator[Any]) -> None:
        self._inner = inner

    def __iter__(self) -> _TickingIterator:
        return self

    def __next__(self) -> Any:
        _tick()
        return next(self._inner)


class _BudgetStringIO(LimitedStringIO):
    """liquid's byte-limited buffer that also checks the deadline on each write."""

    def write(self, s: str, /) -> int:
        _tick()
        if s:
            # Same byte count as liquid's, without encoding ASCII text to find it.
            self.size += len(s) if s.isascii() else len(s.encode("utf-8"))
            if self.size > self.limit:
                raise OutputStreamLimitError("output stream limit reached", token=None)
        return StringIO.write(self, s)


class _SandboxContext(RenderContext):
    """Render context that checks the budget on lookups, filters, scopes and loops."""

    __slots__ = ()

    def get(
        self, path: list[object], *, token: Token | None, default: object = UNDEFINED
    ) -> object:
        _tick()
        return super().get(path, token=token, default=default)

    def resolve(self, name: str, *, token: Token | None = None, default: object = UNDEFINED) -> Any:
        _tick()
        return super().resolve(name, token=token, default=default)

    def filter(self, name: str, token: Token | None) -> Callable[..., object]:
        _tick()
        return super().filter(name, token)

    @contextmanager
    def extend(
        self, namespace: Mapping[str, object], template: BoundTemplate | None = None
    ) -> Iterator[RenderContext]:
        _tick()
        with super().extend(namespace, template) as context:
            yield context

    @contextmanager
    def loop(self, namespace: Mapping[str, object], forloop: Any) -> Iterator[RenderContext]:
        self.raise_for_loop_limit(int(forloop.length))  # liquid's own limit first
        budget = _ACTIVE.get()
        if budget is not None:
            budget.iterations += int(forloop.length)
            limit = budget.limits.max_total_loop_iterations
            if budget.iterations > limit:
                raise _RenderLimitError(
                    "max_total_loop_iterations", f"more than {limit} loop iterations in one render"
                )
        if isinstance(forloop, ForLoop):
            forloop.it = _TickingIterator(forloop.it)
        with super().loop(namespace, forloop) as context:
            yield context

    def get_buffer(self, buf: TextIO | None = None) -> StringIO:
        limit = self.env.output_stream_limit
        assert limit is not None  # always set by _make_environment
        carry = buf.size if isinstance(buf, LimitedStringIO) else 0
        return _BudgetStringIO(limit=limit - carry)


class _SandboxTemplate(BoundTemplate):
    context_class = _SandboxContext

    def _get_buffer(self) -> StringIO:
        limit = self.env.output_stream_limit
        assert limit is not None
        return _BudgetStringIO(limit=limit)


# --- data weight: an estimate of how much text a value becomes ----------------------

_MAX_WEIGHT_DEPTH = 32


def _weight(value: object, budget: _Budget | None, depth: int = 0) -> int:
    """Estimate the characters ``value`` becomes when liquid turns it into text."""
    scalar = _scalar_weight(value)
    if scalar is not None:
        return scalar
    if depth >= _MAX_WEIGHT_DEPTH or isinstance(value, Undefined):
        return 1
    key = id(value)
    if budget is not None and key in budget.weights:
        return budget.weights[key][1]
    if budget is not None:
        budget.weights[key] = (value, 0)  # provisional entry: stops cycles
    total = _container_weight(value, budget, depth)
    if budget is not None:
        budget.weights[key] = (value, total)
    return total


def _scalar_weight(value: object) -> int | None:
    """The weight of a string, number, None or range; None for anything else."""
    if isinstance(value, str):
        return len(value)
    if value is None or isinstance(value, bool | float | Decimal):
        return 8
    if isinstance(value, int):
        return value.bit_length() // 3 + 1
    if isinstance(value, range):
        try:
            return len(value) * (len(str(value.stop)) + 1)
        except OverflowError:
            return 1 << 62
    return None


def _container_weight(value: object, budget: _Budget | None, depth: int) -> int:
    """The summed weight of a mapping's or sequence's items; 16 for any other object."""
    total = 0
    if isinstance(value, Mapping):
        for k, v in value.items():
            total += _weight(k, budget, depth + 1) + _weight(v, budget, depth + 1) + 4
    elif isinstance(value, list | tuple):
        for item in value:
            total += _weight(item, budget, depth + 1)
    else:
        total = 16
    return total


# --- filter guards -----------------------------------------------------------------


def _check_value(value: object, limits: TemplateLimits, role: str) -> None:
    """Reject a filter input or result bigger than the limits allow."""
    if isinstance(value, str):
        if len(value) > limits.max_string_length:
            raise _FilterLimitError(
                "max_string_length",
                f"{role} string of {len(value)} characters exceeds {limits.max_string_length}",
            )
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if value.bit_length() > limits.max_integer_digits * 3.33:
            raise _FilterLimitError(
                "max_integer_digits", f"{role} integer exceeds {limits.max_integer_digits} digits"
            )
    elif isinstance(value, Decimal):
        if value.is_finite() and value.adjusted() > limits.max_integer_digits:
            raise _FilterLimitError(
                "max_integer_digits", f"{role} number exceeds {limits.max_integer_digits} digits"
            )
    elif isinstance(value, list | tuple | range):
        try:
            size = len(value)
        except OverflowError:  # a range longer than sys.maxsize
            size = limits.max_collection_length + 1
        if size > limits.max_collection_length:
            raise _FilterLimitError(
                "max_collection_length",
                f"{role} collection of more than {limits.max_collection_length} items",
            )


def _check_text(estimate: int, limits: TemplateLimits, what: str) -> None:
    if estimate > limits.max_string_length:
        raise _FilterLimitError(
            "max_string_length",
            f"{what} would build about {estimate} characters, more than {limits.max_string_length}",
        )


def _joined_weight(items: object, separator: object, budget: _Budget | None) -> int:
    """The estimated length of ``items`` joined with ``separator``."""
    count = len(items) if isinstance(items, Sequence) else 1
    return _weight(items, budget) + _weight(separator, budget) * max(count - 1, 0)


def _transcript_weight(
    messages: object, separator: object, labels: Mapping[str, object], budget: _Budget | None
) -> int:
    """The estimated length of ``transcript``'s result: the messages joined, plus the
    longest role label and ``": "`` on every line (a label replaces a role, which the
    messages' weight already counts, so this over-estimates a little)."""
    count = len(messages) if isinstance(messages, Sequence) else 1
    label = max((_weight(value, budget) for value in labels.values()), default=0)
    return _joined_weight(messages, separator, budget) + (label + 2) * count


# Filters that turn a non-string left value or argument into text.
_TEXT_FILTERS = frozenset(
    {
        "append", "base64_decode", "base64_encode", "base64_url_safe_decode",
        "base64_url_safe_encode", "capitalize", "downcase", "escape", "escape_once", "lstrip",
        "newline_to_br", "prepend", "remove", "remove_first", "remove_last", "replace",
        "replace_first", "replace_last", "rstrip", "slice", "sort_natural", "split", "squish",
        "strip", "strip_html", "strip_newlines", "truncate", "truncatewords", "upcase",
        "url_decode", "url_encode", "date",
    }
)  # fmt: skip


def _bind(
    signature: inspect.Signature | None,
    left: object,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A filter call's arguments after the left value as the filter receives them.

    Returns the values of the parameters it takes by position, whether the template
    gave them by position or by name (``join: separator: x``), defaults filled in, and
    the remaining keyword arguments (``transcript``'s role labels). The arguments are
    returned as given when the signature is unknown or does not accept them (the call
    then fails on its own).
    """
    if signature is None:
        return args, dict(kwargs)
    try:
        bound = signature.bind(left, *args, **kwargs)
    except TypeError:
        return args, dict(kwargs)
    bound.apply_defaults()
    positional: list[Any] = []
    named: dict[str, Any] = {}
    for param_name, value in list(bound.arguments.items())[1:]:
        kind = signature.parameters[param_name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif kind is inspect.Parameter.KEYWORD_ONLY:
            named[param_name] = value
        else:
            positional.append(value)
    return tuple(positional), named


def _precheck(
    name: str,
    left: object,
    args: tuple[Any, ...],
    named: Mapping[str, Any],
    limits: TemplateLimits,
    budget: _Budget | None,
) -> None:
    """Refuse, before running it, a filter call whose result would exceed the limits.

    ``args`` and ``named`` are the call's arguments as :func:`_bind` returns them.

    Raises:
        _FilterLimitError: The result would exceed ``max_string_length`` or
            ``max_collection_length``, or a ``date`` input ``max_date_input``.
    """
    if name in _TEXT_FILTERS:
        for value in (left, *args, *named.values()):
            if isinstance(value, str | int | float | Decimal | RenderContext | Environment):
                continue
            if value is not None:
                _check_text(_weight(value, budget), limits, f"'{name}' on a collection")
    text = left if isinstance(left, str) else None
    if name in {"replace", "replace_first", "replace_last"} and text is not None and args:
        seq, sub = str(args[0]), str(args[1]) if len(args) > 1 else ""
        count = 1 if name != "replace" else (text.count(seq) if seq else len(text) + 1)
        _check_text(len(text) + count * max(len(sub) - len(seq), 0), limits, f"'{name}'")
    elif name == "split" and text is not None:
        sep = args[0] if args else ""
        parts = len(text) if not isinstance(sep, str) or not sep else text.count(sep) + 1
        if sep == " ":
            parts = len(text.split(None, limits.max_collection_length))
        if parts > limits.max_collection_length:
            raise _FilterLimitError(
                "max_collection_length",
                f"'split' would make {parts} items, more than {limits.max_collection_length}",
            )
    elif name == "join":
        _check_text(_joined_weight(left, args[0] if args else " ", budget), limits, "'join'")
    elif name == "transcript":
        separator = args[0] if args else "\n"
        _check_text(_transcript_weight(left, separator, named, budget), limits, "'transcript'")
    elif name == "date" and isinstance(left, str) and len(left) > limits.max_date_input:
        raise _FilterLimitError(
            "max_date_input",
            f"'date' of a {len(left)}-character string, longer than {limits.max_date_input}",
        )


def _postcheck(
    name: str,
    left: object,
    args: tuple[Any, ...],
    result: object,
    limits: TemplateLimits,
    budget: _Budget | None,
) -> None:
    _check_value(result, limits, f"'{name}' result")
    if name == "concat" and isinstance(result, list):
        # concat is the one filter that makes a collection heavier than its inputs.
        inputs = max(_weight(left, budget), _weight(args[0], budget) if args else 0)
        if _weight(result, budget) > max(limits.max_string_length, inputs):
            _check_text(_weight(result, budget), limits, "'concat'")


_INJECTED = frozenset({"context", "environment"})
"""Keyword arguments liquid passes to filters marked ``with_context``/``with_environment``."""


def _guard(name: str, func: Callable[..., Any], limits: TemplateLimits) -> Callable[..., Any]:
    """Wrap a filter with the deadline and size checks; keeps liquid's marker attributes.

    The size checks see the arguments the filter receives, whether the template passed
    them by position or by name.
    """

    try:
        signature: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None

    @wraps(func)
    def guarded(left: object, *args: Any, **kwargs: Any) -> Any:
        budget = _ACTIVE.get()
        _tick()
        _check_value(left, limits, f"'{name}' input")
        for value in (*args, *kwargs.values()):
            if not isinstance(value, RenderContext | Environment):
                _check_value(value, limits, f"'{name}' argument")
        named: dict[str, Any] = {}
        if _INJECTED.issuperset(kwargs):  # no keyword argument from the template
            positional = args
        else:
            positional, named = _bind(signature, left, args, kwargs)
        _precheck(name, left, positional, named, limits, budget)
        result = func(left, *args, **kwargs)
        _postcheck(name, left, positional, result, limits, budget)
        return result

    return guarded


# --- environment -------------------------------------------------------------------


def _refuse_long_range(expression: LoopExpression, context: RenderContext) -> None:
    """Refuse a loop with ``offset:`` or ``reversed`` over a range longer than the render's
    iteration budget, before liquid slices it: skipping to the offset and reversing walk
    the range in C, where no budget check runs."""
    if expression.offset is None and not expression.reversed:
        return  # liquid slices lazily from the start: its own loop limit fires first
    iterable = expression.iterable.evaluate(context)
    if not isinstance(iterable, range):
        return  # other sequences are already in memory, their length bounded by the data
    limits = cast("_SandboxEnvironment", context.env)._opsrun_limits
    try:
        length = len(iterable)
    except OverflowError:  # longer than sys.maxsize
        length = limits.max_total_loop_iterations + 1
    if length > limits.max_total_loop_iterations:
        raise _RenderLimitError(
            "max_total_loop_iterations",
            f"a loop over a range of {length} items; at most "
            f"{limits.max_total_loop_iterations} iterations in one render",
        )


class _RangeGuard(Node):
    """Refuses, before rendering, a loop over a range its budget cannot walk."""

    __slots__ = ()
    expression: LoopExpression

    # Mixed in before liquid's ForNode / TablerowNode, so super() reaches their methods,
    # not Node's abstract ones (mypy sees only the declared base).
    def render_to_output(self, context: RenderContext, buffer: TextIO) -> int:
        _refuse_long_range(self.expression, context)
        return super().render_to_output(context, buffer)  # type: ignore[safe-super]

    async def render_to_output_async(self, context: RenderContext, buffer: TextIO) -> int:
        _refuse_long_range(self.expression, context)
        return await super().render_to_output_async(context, buffer)


class _BoundedForNode(_RangeGuard, ForNode):
    __slots__ = ()


class _BoundedForTag(ForTag):
    node_class = _BoundedForNode


class _BoundedTablerowNode(_RangeGuard, TablerowNode):
    __slots__ = ()


class _BoundedTablerowTag(TablerowTag):
    node_class = _BoundedTablerowNode


class _SandboxEnvironment(Environment):
    template_class = _SandboxTemplate
    _opsrun_limits: TemplateLimits

    def setup_tags_and_filters(self, *, extra: bool = False) -> None:
        super().setup_tags_and_filters(extra=extra)
        self.add_tag(_BoundedForTag)
        self.add_tag(_BoundedTablerowTag)
        self.filters["last"] = last
        self.filters["transcript"] = transcript
        self.filters["uniq"] = uniq
        self.filters["strip_html"] = strip_html_filter(_tick)
        self.filters = {
            name: _guard(name, func, self._opsrun_limits) for name, func in self.filters.items()
        }

    def _parse(self, source: str) -> list[Node]:
        limits = self._opsrun_limits
        if len(source) > limits.max_source_length:
            raise _RenderLimitError(
                "max_source_length",
                f"template source of {len(source)} characters exceeds {limits.max_source_length}",
            )
        _check_delimiters(source)
        clock = _Clock(limits.timeout_seconds)

        def tokens() -> Iterator[Token]:
            tag = ""
            for token in self.tokenizer()(source):
                now = monotonic()
                if now > clock.deadline and clock.spent(now):
                    raise _RenderLimitError(
                        "timeout_seconds", f"parsing took longer than {limits.timeout_seconds}s"
                    )
                if token.kind == TOKEN_EXPRESSION:
                    # liquid's expression lexer is quadratic on some inputs (unclosed
                    # quotes, runs of "(" or '["'), so one expression must stay short.
                    lines = token.value.split("\n") if tag == "liquid" else [token.value]
                    longest = max(len(line) for line in lines)
                    if longest > limits.max_expression_length:
                        raise _RenderLimitError(
                            "max_expression_length",
                            f"an expression of {longest} characters exceeds "
                            f"{limits.max_expression_length}",
                        )
                else:  # an expression belongs to the tag or output just before it
                    tag = token.value if token.kind == TOKEN_TAG else ""
                yield token

        return get_parser(self).parse(TokenStream(tokens()))


MAX_SPACE_BEFORE_CLOSE = 256
"""Whitespace characters allowed right before a tag's or an output's closing delimiter."""
_TOKEN_START = re.compile(r"\{[{%]")
_VERBATIM_OPEN = re.compile(r"\{%-?\s*(raw|doc)\s*-?%\}")
_VERBATIM_CLOSE = {
    "raw": re.compile(r"\{%-?\s*endraw\s*-?%\}"),
    "doc": re.compile(r"\{%-?\s*enddoc\s*-?%\}"),
}


def _check_delimiters(source: str) -> None:
    """Refuse what liquid's template lexer would take quadratic time on, in one pass.

    The lexer's patterns backtrack over a tag (``{%``) or output (``{{``) that is never
    closed, and over a run of whitespace right before a closing delimiter: 64 KB of
    either took minutes of CPU. Tags and outputs are found as the lexer finds them
    (each starts where the text before it ends; ``raw`` and ``doc`` blocks are taken
    whole), so what is inside a string, a tag or a verbatim block does not count.

    Raises:
        LiquidSyntaxError: a tag or output is never closed (with its position).
        _RenderLimitError: more than :data:`MAX_SPACE_BEFORE_CLOSE` whitespace characters
            before a closing delimiter (limit ``max_space_before_close``).
    """
    pos = 0
    while (found := _TOKEN_START.search(source, pos)) is not None:
        start = found.start()
        closer = "}}" if source[start + 1] == "{" else "%}"
        if closer == "%}" and (verbatim := _VERBATIM_OPEN.match(source, start)) is not None:
            block_end = _VERBATIM_CLOSE[verbatim[1]].search(source, verbatim.end())
            if block_end is not None:
                pos = block_end.end()
                continue
        end = source.find(closer, start + 2)
        if end < 0:
            token = _token_at(source, start)
            raise LiquidSyntaxError(f"expected {closer!r}, found end of file", token=token)
        inner = end - 1 if end > start + 2 and source[end - 1] == "-" else end
        space = inner
        while space > start + 2 and source[space - 1].isspace():
            space -= 1
        if inner - space > MAX_SPACE_BEFORE_CLOSE:
            error = _RenderLimitError(
                "max_space_before_close",
                f"{inner - space} whitespace characters before {closer!r} exceed "
                f"{MAX_SPACE_BEFORE_CLOSE}",
            )
            error.token = _token_at(source, start)
            raise error
        pos = end + 2


def _token_at(source: str, start: int) -> Token:
    """A token at ``start`` for an error's position (liquid reads line and column off it)."""
    return Token(TOKEN_EOF, value=source[start : start + 80], start_index=start, source=source)


def _make_environment(
    limits: TemplateLimits, loader: BaseLoader | None, *, strict: bool
) -> Environment:
    # liquid reads its limits from class attributes, so each engine gets its own class.
    cls = type(
        "_LimitedEnvironment",
        (_SandboxEnvironment,),
        {
            "_opsrun_limits": limits,
            "block_nesting_limit": limits.block_nesting_limit,
            "context_depth_limit": limits.context_depth_limit,
            "loop_iteration_limit": limits.loop_iteration_limit,
            "local_namespace_limit": limits.local_namespace_limit,
            "output_stream_limit": limits.output_stream_limit,
        },
    )
    env_cls = cast("type[_SandboxEnvironment]", cls)
    return env_cls(
        loader=loader,
        undefined=StrictUndefined if strict else Undefined,
        tolerance=Mode.STRICT,
        strict_filters=True,
        autoescape=False,
    )


# --- error translation -------------------------------------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _limit_of(exc: BaseException) -> tuple[str | None, BaseException]:
    for link in _chain(exc):
        limit = getattr(link, "limit", None)
        if isinstance(limit, str):
            return limit, link
        for kind, name in _LIQUID_LIMITS.items():
            if isinstance(link, kind):
                return name, link
        if isinstance(link, LiquidValueError) and "range" in str(link.message):
            return "max_collection_length", link  # a range longer than sys.maxsize
        if isinstance(link, RecursionError):
            return "recursion_depth", link
        if isinstance(link, MemoryError):
            return "memory", link
    return None, exc


def _to_template_error(
    exc: BaseException, phase: str, limits: TemplateLimits | None = None, source: str = ""
) -> TemplateError:
    """Turn any exception from liquid into a TemplateError naming where it happened
    (``source``: the template, for errors liquid gives no position)."""
    limit, cause = _limit_of(exc)
    liquid_error = next((e for e in _chain(exc) if isinstance(e, LiquidError)), None)
    text = _error_text(exc, limit, cause, liquid_error)
    details: dict[str, Any] = {"phase": phase, "error": type(cause).__name__}
    if limit is not None:
        text, limit_details = _with_limit(text, limit, limits)
        details.update(limit_details)
    if isinstance(exc, UndefinedError) or isinstance(liquid_error, UndefinedError):
        details["undefined"] = True
    where, position_details = _position(exc, source)
    details.update(position_details)
    template_name = liquid_error.template_name if liquid_error is not None else None
    if template_name:
        details["template"] = str(template_name)
        where += f" in {str(template_name)!r}"
    return TemplateError(f"template {phase} failed: {text}{where}", details=details)


def _error_text(
    exc: BaseException,
    limit: str | None,
    cause: BaseException,
    liquid_error: LiquidError | None,
) -> str:
    """What went wrong, in words: the limit's error, liquid's message or the exception."""
    if limit is not None and isinstance(cause, LiquidError):
        return str(cause.message)
    if limit is not None:
        text = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        return f"{text} (limit {limit})"
    if isinstance(liquid_error, TemplateNotFoundError):
        return f"template not found: {liquid_error.message!r} (no loader provides it)"
    if liquid_error is not None and liquid_error.message is not None:
        return str(liquid_error.message)
    return f"{type(exc).__name__}: {exc}"


def _with_limit(text: str, limit: str, limits: TemplateLimits | None) -> tuple[str, dict[str, Any]]:
    """``text`` naming the limit (and its value when known), and the limit's details."""
    details: dict[str, Any] = {"limit": limit}
    if limit not in text:
        text = f"{text} (limit {limit})"
    value = getattr(limits, limit, None) if limits is not None else None
    if value is not None:
        details["limit_value"] = value
        text = text.replace(f"(limit {limit})", f"(limit {limit}={value})")
    return text, details


_UNCLOSED = re.compile(r"expected tag end(\w+)")
"""Liquid's message for a block tag never closed (it gives no position for it)."""
_TAG_START = re.compile(r"\{%-?[ \t\r\n]*(\w+)")


def _position(exc: BaseException, source: str = "") -> tuple[str, dict[str, Any]]:
    """Where in the source the first liquid error with a token points, and its details;
    for a block tag never closed, where it opens (found in ``source``)."""
    liquid_error = next((e for e in _chain(exc) if isinstance(e, LiquidError)), None)
    token = next((e.token for e in _chain(exc) if isinstance(e, LiquidError) and e.token), None)
    position = None
    if token is not None and token.start_index >= 0:
        try:
            position = LiquidError("", token=token).context()
        except (ValueError, IndexError):
            position = None
    if token is None or position is None:
        message = str(liquid_error.message) if liquid_error is not None else ""
        return _searched_position(source, message)
    line, column, _prev, current, _next = position
    near = token.value if len(token.value) <= 80 else bound_text(token.value, 77) + "..."
    details = {
        "line": line,
        "column": column + 1,
        "near": near,
        "source_line": bound_text(current, 200),
    }
    return f" at line {line}, column {column + 1}, near {near!r}", details


def _searched_position(source: str, message: str) -> tuple[str, dict[str, Any]]:
    """Where the error that liquid gives no position for is in ``source``: for a block
    tag never closed, the last ``{% name`` without its ``{% endname``; else the first
    ``{{ … }}`` output that fails alike when parsed on its own."""
    if not source:
        return "", {}
    unclosed = _UNCLOSED.search(message)
    if unclosed is not None:
        name = unclosed[1]
        opened: list[re.Match[str]] = []
        for tag in _TAG_START.finditer(source):
            if tag[1] == name:
                opened.append(tag)
            elif tag[1] == f"end{name}" and opened:
                opened.pop()
        if not opened:
            return "", {}
        start = opened[-1].start()
        end = source.find("%}", start, start + 200)
        text = source[start : start + 80] if end < 0 else source[start : end + 2]
        return _at(source, start, text, " (never closed)")
    start = source.find("{{")
    while start >= 0:  # each output once: linear in the source
        end = source.find("}}", start + 2)
        if end < 0:
            break
        output = source[start : end + 2]
        try:
            _SYNTAX_ONLY.from_string(output)
        except LiquidError as exc:
            if str(exc.message) == message:
                return _at(source, start, output, "")
        start = source.find("{{", end + 2)
    return "", {}


def _at(source: str, index: int, near: str, note: str) -> tuple[str, dict[str, Any]]:
    """The words and details of a position in ``source`` found by searching it."""
    line, column = _line_column(source, index)
    near = bound_text(near, 80)
    line_start = source.rfind("\n", 0, index) + 1
    line_end = source.find("\n", index)
    current = source[line_start : None if line_end < 0 else line_end]
    details = {
        "line": line,
        "column": column,
        "near": near,
        "source_line": bound_text(current, 200),
    }
    return f" at line {line}, column {column}, near {near!r}{note}", details


_SYNTAX_ONLY = Environment()
"""Parses one output statement alone, to find the one liquid's error is about."""


# --- save-time checks ----------------------------------------------------------------


def _line_column(source: str, index: int) -> tuple[int, int]:
    """The 1-based line and column of ``index`` in ``source``."""
    line = source.count("\n", 0, index) + 1
    return line, index - (source.rfind("\n", 0, index) + 1) + 1


def _partial_names(template: BoundTemplate) -> Iterator[tuple[str | None, Token]]:
    """Each ``include``/``render`` of ``template``, in source order: the partial's name
    (None when a variable names it) and the token of the name."""
    context = RenderContext(template)
    stack = list(reversed(template.nodes))
    while stack:
        node = stack.pop()
        partial = node.partial_scope()
        if partial is not None:
            name = partial.name
            literal = name if isinstance(name, str) else None
            if isinstance(name, StringLiteral):
                literal = name.value
            expression = getattr(node, "name", None)  # include/render: the name expression
            token = expression.token if isinstance(expression, Expression) else node.token
            yield literal or None, token
        stack.extend(reversed(list(node.children(context, include_partials=False))))


class _Checker:
    """What would fail in a template and the partials it names, found without data.

    Partials are loaded with ``env``, the environment of the template's strictness.
    liquid's analysis evaluates the name of every partial without data, which a strict
    template refuses for a name taken from a variable; such a template is analysed
    again as parsed by ``lax``, the lax environment.
    """

    def __init__(self, env: Environment, lax: Environment, limits: TemplateLimits) -> None:
        self.env = env
        self.lax = lax
        self.limits = limits
        self.found: list[str] = []
        """The problems found so far."""
        self._seen: set[str] = set()

    def problems(self, template: BoundTemplate, source: str) -> list[str]:
        """The problems of ``template`` (parsed from ``source``) and of its partials."""
        self._check(template, source, None, 0)
        return self.found

    def _filters(self, template: BoundTemplate, source: str) -> dict[str, list[Span]]:
        """Where ``template`` uses each filter (its partials left out)."""
        try:
            return template.analyze(include_partials=False).filters
        except UndefinedError:  # strict: ``include host.card`` names an undefined variable
            return self.lax.from_string(source).analyze(include_partials=False).filters

    def _check(self, template: BoundTemplate, source: str, partial: str | None, depth: int) -> None:
        inside = "" if partial is None else f" in partial {partial!r}"
        for filter_name, spans in self._filters(template, source).items():
            if filter_name in self.env.filters:
                continue
            for span in spans:
                line, column = _line_column(source, span.index)
                self.found.append(
                    f"unknown filter {filter_name!r} at line {line}, column {column}{inside}"
                )
        if depth >= self.limits.context_depth_limit:
            return  # deeper partials would fail at run time with context_depth_limit
        for name, token in _partial_names(template):
            if name is None or name in self._seen:
                continue  # named by a variable (known at run time only), or checked
            self._seen.add(name)
            try:
                loaded = self.env.get_template(name)
            except Exception as exc:
                line, column = _line_column(source, token.start_index)
                message = _to_template_error(exc, "parse", self.limits).message
                self.found.append(
                    f"partial {name!r} (at line {line}, column {column}{inside}): {message}"
                )
                continue
            # Every token of a template holds its source text.
            loaded_source = loaded.nodes[0].token.source if loaded.nodes else ""
            self._check(loaded, loaded_source, name, depth + 1)


# --- engine --------------------------------------------------------------------------


class TemplateEngine:
    """Parses and renders Liquid templates within :class:`TemplateLimits`.

    Parsed templates are cached (bounded LRU keyed by source and strictness), so
    rendering the same source again skips parsing. Safe to share between threads.

    Args:
        limits: Resource limits; defaults to ``TemplateLimits()``.
        loader: A liquid loader for ``include``/``render``. Without one, templates
            cannot load other templates (and never touch the file system).
        cache_size: How many parsed templates to keep.

    Raises:
        ConfigError: ``cache_size`` is not positive.
    """

    def __init__(
        self,
        *,
        limits: TemplateLimits | None = None,
        loader: BaseLoader | None = None,
        cache_size: int = 256,
    ) -> None:
        if cache_size <= 0:
            raise ConfigError(f"cache_size must be positive, got {cache_size}")
        self.limits: TemplateLimits = limits or TemplateLimits()
        self._envs = {
            strict: _make_environment(self.limits, loader, strict=strict)
            for strict in (False, True)
        }
        self._cache: OrderedDict[tuple[str, bool], BoundTemplate] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def parse(self, source: str, *, strict_variables: bool = False) -> BoundTemplate:
        """Parse ``source`` once and cache the result.

        Raises:
            TemplateError: The source is too long, nested too deeply or not valid Liquid.
        """
        if not isinstance(source, str):
            raise TemplateError(f"template source must be a string, got {type(source).__name__}")
        key = (source, strict_variables)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self._hits += 1
                return cached
            self._misses += 1
        try:
            template = self._envs[strict_variables].from_string(source)
        except Exception as exc:
            raise _to_template_error(exc, "parse", self.limits, source) from exc
        with self._lock:
            self._cache[key] = template
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return template

    def problems(self, source: str, *, strict_variables: bool = False) -> list[str]:
        """What would fail in ``source`` before any data is known, for save-time checks.

        A template that does not parse gives its parse error; one that parses gives one
        problem per use of a filter this engine does not have, with its line and column,
        and one per partial it names literally (``{% include 'card' %}``) that cannot be
        loaded (missing, too long, not valid Liquid); the partials' own problems are
        listed too, naming the partial. A partial named by a variable
        (``{% include host.card %}``) is known only at run time and is not checked.
        Never raises.
        """
        try:
            template = self.parse(source, strict_variables=strict_variables)
        except TemplateError as exc:
            return [exc.message]
        checker = _Checker(self._envs[strict_variables], self._envs[False], self.limits)
        try:
            return checker.problems(template, source)
        except Exception as exc:  # an unexpected failure of liquid's static analysis
            return [*checker.found, _to_template_error(exc, "parse", self.limits).message]

    def render(
        self,
        source: str,
        context: Mapping[str, Any] | None = None,
        *,
        strict_variables: bool = False,
    ) -> str:
        """Render ``source`` against plain data.

        Args:
            source: Liquid template text.
            context: Variables: ``art``, ``chatHistory``, ``run`` and any extra keys.
            strict_variables: If true, an undefined variable is an error; otherwise it
                renders as an empty string.

        Raises:
            TemplateError: The template failed to parse or render, or exceeded a limit
                (``details["limit"]`` names which).
        """
        template = self.parse(source, strict_variables=strict_variables)
        token = _ACTIVE.set(_Budget(self.limits))
        try:
            return template.render(dict(context or {}))
        except Exception as exc:
            raise _to_template_error(exc, "render", self.limits) from exc
        finally:
            _ACTIVE.reset(token)

    def cache_info(self) -> TemplateCacheInfo:
        """Return hit, miss and size counts of the parse cache."""
        with self._lock:
            return TemplateCacheInfo(self._hits, self._misses, self._cache_size, len(self._cache))

    def cache_clear(self) -> None:
        """Drop every cached template and reset the counters."""
        with self._lock:
            self._cache.clear()
            self._hits = self._misses = 0
