"""Credential resolvers: ``credentialRef`` → secret, at run time, outside ``params``."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import ConfigError

__all__ = ["EnvCredentials"]


class EnvCredentials:
    """Resolves a ``credentialRef`` from environment variables (a ``CredentialResolver``).

    ``names`` maps a reference to a variable name; a reference without an entry is
    looked up as ``prefix + ref`` upper-cased, with non-alphanumerics turned into ``_``
    (``EnvCredentials(prefix="OPSRUN_CRED_")`` resolves ``openai-main`` from
    ``OPSRUN_CRED_OPENAI_MAIN``). The environment is read at each call, so rotated
    keys take effect without a restart.
    """

    def __init__(
        self,
        names: Mapping[str, str] | None = None,
        *,
        prefix: str = "",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._names = dict(names or {})
        self._prefix = prefix
        self._environ = environ

    def variable(self, credential_ref: str) -> str:
        """The environment variable that holds ``credential_ref``."""
        name = self._names.get(credential_ref)
        if name is not None:
            return name
        cleaned = "".join(c if c.isalnum() else "_" for c in credential_ref)
        return f"{self._prefix}{cleaned}".upper()

    async def resolve(self, credential_ref: str) -> str:
        """Return the secret.

        Raises:
            ConfigError: the variable is unset or empty (the message names the variable,
                never a value).
        """
        environ = os.environ if self._environ is None else self._environ
        name = self.variable(credential_ref)
        value = environ.get(name)
        if not value:
            raise ConfigError(f"credential is not available: environment variable {name} is unset")
        return value
