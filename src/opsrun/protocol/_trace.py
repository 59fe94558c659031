"""The trace of one driver turn: a JSON document of what was asked, sent, answered and done.

The document is built as the turn goes (:class:`TraceBuilder`) and returned on the
result; with ``DriverConfig.write_traces`` it is also written, as one line of compact
JSON, to ``<root>/.opsrun/traces/<trace_id>.json`` (one line so that ``grep`` pipelines
over a folder of traces work). The files shown to the model appear by path and sha256
only; the validated plan is kept as the model wrote it; the model's raw answers only with
``DriverConfig.trace_raw``. Secrets are masked in the whole document.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opsrun._redact import redact_text

from ._atomic import write_atomic
from ._driver_config import DriverConfig
from ._schemas import schema_hash

__all__ = ["TRACE_DIR", "TraceBuilder", "config_snapshot", "write_trace"]

TRACE_DIR = Path(".opsrun") / "traces"
"""Where traces are written, relative to the project root."""

_LOGGER = logging.getLogger("opsrun.protocol")


def config_snapshot(config: DriverConfig, *, model: str, provider: str) -> dict[str, Any]:
    """The settings that shaped a turn, as JSON values (no check command, no secrets)."""
    return {
        "model": model,
        "provider": provider,
        "protocol_version": config.protocol_version,
        "fallback_to_v1": config.fallback_to_v1,
        "default_mode": config.default_mode,
        "strict_json": config.strict_json,
        "repair_attempts": config.repair_attempts,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "presence_penalty": config.presence_penalty,
        "frequency_penalty": config.frequency_penalty,
        "max_tokens": config.max_tokens,
        "max_tokens_large_input": config.max_tokens_large_input,
        "large_input_chars": config.large_input_chars,
        "timeout": config.timeout,
        "provider_attempts": config.provider_attempts,
        "allow_delete": config.allow_delete,
        "has_check": config.check is not None,
        "normalize_eol": config.normalize_eol,
        "use_whitelist": config.policy.use_whitelist,
        "schema_version": config.protocol_version,
        "schema_hash": schema_hash(config.protocol_version),
    }


class TraceBuilder:
    """Collects one turn's trace document; field names are documented in the driver docs."""

    def __init__(
        self, trace_id: str, *, config: DriverConfig, model: str, provider: str, goal: str
    ) -> None:
        self.config = config
        version = config.protocol_version
        self.doc: dict[str, Any] = {
            "trace_id": trace_id,
            "created_at": datetime.now(UTC).isoformat(),
            "event": "LLM_PLAN_FAILED",
            "mode": None,
            "route_reason": None,
            "goal": redact_text(goal),
            "status": None,
            "error_code": None,
            "error_message": None,
            "config_snapshot": config_snapshot(config, model=model, provider=provider),
            "schema_version": version,
            "schema_hash": schema_hash(version),
            "protocol_default": version,
            "protocol_attempts": [],
            "protocol_version_used": None,
            "protocol_fallback_attempted": False,
            "protocol_fallback_reason": None,
            "protocol_fallback_stage": None,
            "protocol_repair_attempt": 0,
            "repair_count": 0,
            "response_format_fallback": False,
            "errors": [],
            "calls": [],
            "read_paths": [],
            "context": [],
            "validated_json": None,
            "preview": [],
            "apply": None,
        }
        if config.trace_raw:
            self.doc["raw_answers"] = []

    def __setitem__(self, key: str, value: Any) -> None:
        self.doc[key] = value

    def __getitem__(self, key: str) -> Any:
        return self.doc[key]

    def add(self, key: str, value: Any) -> None:
        """Append ``value`` to the list field ``key``."""
        self.doc[key].append(value)

    def raw(self, text: str) -> None:
        """Keep a raw answer, masked, when the config asks for raw answers."""
        if self.config.trace_raw:
            self.doc["raw_answers"].append(redact_text(text))


def write_trace(root: str | os.PathLike[str], doc: dict[str, Any]) -> Path | None:
    """Write ``doc`` to ``<root>/.opsrun/traces/<trace_id>.json``; None (and a log) on failure."""
    target = Path(root) / TRACE_DIR / f"{doc['trace_id']}.json"
    data = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
    try:
        write_atomic(target, data.encode("utf-8"), durable=False)
    except OSError as exc:
        _LOGGER.warning("could not write the trace %s: %s", target, exc)
        return None
    return target
