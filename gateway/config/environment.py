"""``${NAME}`` references: where they are read from, their expansion, and the secrets that may only
ever be one (a bot's credential, a bearer secret such as the admin token).

Apart from the builders because one rule serves them all, and two ways of reading the environment
with it: ``serve`` needs every name set, ``check-config`` notes what is not (:class:`_Environment`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from gateway.config.errors import ConfigError
from gateway.config.model import ADMIN_TOKEN_MIN

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Environment(Mapping[str, str]):
    """Where ``${NAME}`` references are read from.

    ``serve`` needs every name set (``require``). ``check-config`` does not: a file is often checked
    where none of its secrets are. There a name that is not set is noted in ``unset`` and its
    reference kept as written, and what only its value could be checked against is left unchecked.
    """

    def __init__(self, environ: Mapping[str, str], *, require: bool) -> None:
        self._environ = environ
        self.require = require
        self.unset: set[str] = set()

    def __getitem__(self, name: str) -> str:
        return self._environ[name]

    def __contains__(self, name: object) -> bool:
        return name in self._environ

    def __iter__(self) -> Iterator[str]:
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)

    def deferred(self, value: str) -> bool:
        """``value`` names a variable that is not set, and this check does not need it."""
        return not self.require and any(name not in self._environ for name in _ENV_REF.findall(value))


def _expand_env(value: str, path: str, environ: Mapping[str, str]) -> str:
    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in environ:
            return environ[name]
        if isinstance(environ, _Environment) and not environ.require:
            environ.unset.add(name)
            return match.group(0)
        raise ConfigError(path, f"environment variable {name} is not set")

    return _ENV_REF.sub(repl, value)


def _secret(value: str, path: str, environ: Mapping[str, str]) -> str:
    """A bot's credential: only ever ``${NAME}``, so the key itself never sits in the file."""
    return _expand_env(_env_reference(value, path), path, environ)


def _env_reference(value: str, path: str) -> str:
    """``value``, which must be exactly one ``${NAME}``: a bearer secret is never written in the file."""
    if not _ENV_REF.fullmatch(value):
        raise ConfigError(path, "must be an environment variable reference ${NAME}, never the secret itself")
    return value


def _bearer_secret(reference: str, path: str, environ: Mapping[str, str]) -> str:
    """The value of the ``${NAME}`` ``reference`` to a secret a client presents as ``Authorization:
    Bearer`` (the admin token, a Brand's introspection secret): too long to guess, once it is known
    (``check-config`` without the variable set leaves it unchecked)."""
    value = _expand_env(reference, path, environ)
    deferred = isinstance(environ, _Environment) and environ.deferred(reference)
    if not deferred and len(value) < ADMIN_TOKEN_MIN:
        raise ConfigError(path, f"must be at least {ADMIN_TOKEN_MIN} characters (e.g. openssl rand -hex 32)")
    return value
