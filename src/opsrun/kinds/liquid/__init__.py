"""The Liquid sandbox of the built-in kinds: python-liquid 2 with resource limits.

:class:`TemplateEngine` parses (with a cache) and renders templates under
:class:`TemplateLimits`; templates cannot reach the file system unless the host passes a
loader. Every failure is a :class:`~opsrun.errors.TemplateError`.
"""

from __future__ import annotations

from ._engine import TemplateEngine as TemplateEngine
from ._limits import TemplateCacheInfo as TemplateCacheInfo
from ._limits import TemplateLimits as TemplateLimits

__all__ = ["TemplateCacheInfo", "TemplateEngine", "TemplateLimits"]
