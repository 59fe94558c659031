"""The one style of every limits and policy object.

Limits and policies are frozen, keyword-only dataclasses that check their fields in
``__post_init__`` with :func:`require`, so a bad value always raises
:class:`~opsrun.errors.ConfigError` with code ``config_error`` and the field named in
both the message and ``details["field"]``.
"""

from __future__ import annotations

from .errors import ConfigError

__all__ = ["require", "require_at_least", "require_whole"]

_UNSET: object = object()


def require(
    config: object, field: str, ok: bool, requirement: str, *, value: object = _UNSET
) -> None:
    """Raise ``ConfigError`` naming ``type(config).field`` unless ``ok``.

    ``requirement`` completes the sentence "<Class>.<field> must be …". The message
    shows ``value``, by default the field's value on ``config`` (pass it when the
    field is not set yet).

    Raises:
        ConfigError: ``ok`` is false.
    """
    if ok:
        return
    owner = type(config).__name__
    if value is _UNSET:
        value = getattr(config, field, None)
    raise ConfigError(
        f"{owner}.{field} must be {requirement}, got {value!r}",
        details={"config": owner, "field": field},
    )


def require_at_least(config: object, minimum: float, *fields: str, optional: bool = False) -> None:
    """Check that each numeric field of ``config`` is ``>= minimum``.

    Booleans are not numbers here. With ``optional=True`` a field may also be None.

    Raises:
        ConfigError: a field is not a number or is below ``minimum``.
    """
    for field in fields:
        value = getattr(config, field)
        if optional and value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        require(config, field, number and value >= minimum, f"a number >= {minimum}")


def require_whole(config: object, field: str, value: object, minimum: int) -> None:
    """Check that ``value``, given for ``field``, is an ``int`` (not a bool) ``>= minimum``.

    Raises:
        ConfigError: it is not.
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    require(config, field, ok, f"an integer >= {minimum}", value=value)
