"""opsrun: operations around a chat turn's main LLM call, and safe LLM edit plans."""

from __future__ import annotations

from .errors import (
    ApplyError as ApplyError,
)
from .errors import (
    ArtifactConflict as ArtifactConflict,
)
from .errors import (
    ConfigError as ConfigError,
)
from .errors import (
    NotFound as NotFound,
)
from .errors import (
    OperationFailed as OperationFailed,
)
from .errors import (
    OpsrunError as OpsrunError,
)
from .errors import (
    PatchError as PatchError,
)
from .errors import (
    PlanError as PlanError,
)
from .errors import (
    ProfileInvalid as ProfileInvalid,
)
from .errors import (
    ProviderError as ProviderError,
)
from .errors import (
    ProviderTimeout as ProviderTimeout,
)
from .errors import (
    RateLimited as RateLimited,
)
from .errors import (
    ResponseFormatRejected as ResponseFormatRejected,
)
from .errors import (
    RunError as RunError,
)
from .errors import (
    StoreError as StoreError,
)
from .errors import (
    TemplateError as TemplateError,
)

__version__ = "0.1.0"
