"""Problems found by profile validation."""

from __future__ import annotations

from enum import StrEnum

from ._base import Model


class ProfileIssueCode(StrEnum):
    """Stable codes of save-time profile problems."""

    EMPTY_PROFILE_ID = "empty_profile_id"
    EMPTY_SESSION_ID = "empty_session_id"
    EMPTY_OPERATION_ID = "empty_operation_id"
    DUPLICATE_OPERATION_ID = "duplicate_operation_id"
    UNKNOWN_OPERATION = "unknown_operation"
    UNKNOWN_DEPENDENCY = "unknown_dependency"
    SELF_DEPENDENCY = "self_dependency"
    CROSS_HOOK_DEPENDENCY = "cross_hook_dependency"
    UNREACHABLE_DEPENDENCY = "unreachable_dependency"
    DEPENDENCY_CYCLE = "dependency_cycle"
    DUPLICATE_WRITE_TAG = "duplicate_write_tag"
    WRITE_TAG_UNKNOWN = "write_tag_unknown"
    INVALID_PARAMS = "invalid_params"
    PROMPT_EFFECT_AFTER_MAIN_LLM = "prompt_effect_after_main_llm"


class ProfileIssue(Model):
    """One problem of a profile, with the operation it concerns."""

    code: ProfileIssueCode
    """Stable code."""
    operation_id: str | None
    """The operation concerned; None for profile-level problems."""
    message: str
    """Human-readable explanation."""
