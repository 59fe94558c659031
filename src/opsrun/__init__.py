"""opsrun: operations around a chat turn's main LLM call, and safe LLM edit plans.

The public surface is this module plus the subpackages ``opsrun.model``,
``opsrun.runner``, ``opsrun.stores``, ``opsrun.protocol`` and ``opsrun.testing``.
"""

from __future__ import annotations

from ._profiles import BUILTIN_PARAMS_MODELS as BUILTIN_PARAMS_MODELS
from ._profiles import ensure_valid_profile as ensure_valid_profile
from ._profiles import validate_profile as validate_profile
from ._redact import DEFAULT_REDACTOR as DEFAULT_REDACTOR
from ._redact import Redactor as Redactor
from ._redact import StreamRedactor as StreamRedactor
from ._redact import redact_text as redact_text
from ._redact import redact_value as redact_value
from ._redact import sha256_text as sha256_text
from .errors import ApplyError as ApplyError
from .errors import ArtifactConflict as ArtifactConflict
from .errors import ConfigError as ConfigError
from .errors import NotFound as NotFound
from .errors import OperationFailed as OperationFailed
from .errors import OpsrunError as OpsrunError
from .errors import PatchError as PatchError
from .errors import PlanError as PlanError
from .errors import ProfileInvalid as ProfileInvalid
from .errors import ProviderError as ProviderError
from .errors import ProviderTimeout as ProviderTimeout
from .errors import RateLimited as RateLimited
from .errors import ResponseFormatRejected as ResponseFormatRejected
from .errors import RunError as RunError
from .errors import StoreError as StoreError
from .errors import TemplateError as TemplateError
from .model import OperationDefinition as OperationDefinition
from .model import OperationProfile as OperationProfile
from .model import OperationResult as OperationResult
from .model import ProfileIssue as ProfileIssue
from .model import ProfileIssueCode as ProfileIssueCode
from .model import RunRequest as RunRequest
from .model import RunResult as RunResult

__version__ = "0.1.0"

__all__ = [
    "BUILTIN_PARAMS_MODELS",
    "DEFAULT_REDACTOR",
    "ApplyError",
    "ArtifactConflict",
    "ConfigError",
    "NotFound",
    "OperationDefinition",
    "OperationFailed",
    "OperationProfile",
    "OperationResult",
    "OpsrunError",
    "PatchError",
    "PlanError",
    "ProfileInvalid",
    "ProfileIssue",
    "ProfileIssueCode",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "Redactor",
    "ResponseFormatRejected",
    "RunError",
    "RunRequest",
    "RunResult",
    "StoreError",
    "StreamRedactor",
    "TemplateError",
    "ensure_valid_profile",
    "redact_text",
    "redact_value",
    "sha256_text",
    "validate_profile",
]
