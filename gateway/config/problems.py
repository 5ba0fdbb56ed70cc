"""The problems of one document: YAML paths, JSON Schema violations in an operator's words ("did
you mean"), and the collector (:class:`_Problems`) that gathers every problem and lists them in the
order of the file.

Apart from the builders because it is how problems are told, not what is checked: the builders of
:mod:`gateway.config.build` run each rule through :meth:`_Problems.attempt` and note what it found.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

import jsonschema

from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.schema import _PATTERN_RULES, SCHEMA

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _yaml_path(parts: Sequence[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _meant(name: object, known: Sequence[str]) -> str | None:
    """The known setting an unknown key most likely misspells, if one is close enough."""
    guesses = difflib.get_close_matches(str(name), known, n=1)
    return guesses[0] if guesses else None


def _schema_problem(error: jsonschema.ValidationError) -> Iterator[tuple[ConfigProblem, bool]]:
    """One JSON Schema violation in an operator's words (each unknown key on its own), each with
    whether to tell it: a misspelt key (``brnads:``) is one mistake, and its "did you mean" already
    names the required key it leaves missing."""
    where = list(error.absolute_path)
    if error.validator in ("additionalProperties", "required"):
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        instance = error.instance if isinstance(error.instance, Mapping) else {}
        known = list(schema.get("properties", {}))
        unknown = [name for name in instance if name not in known]
        if error.validator == "additionalProperties":
            for name in unknown:
                meant = _meant(name, known)
                hint = f"did you mean {meant}?" if meant else f"this block takes {', '.join(known)}"
                yield ConfigProblem(_yaml_path([*where, str(name)]), f"unknown setting; {hint}"), True
            return
        misspelt = {_meant(name, known) for name in unknown}
        for name in schema.get("required", []):
            if name not in instance:
                yield ConfigProblem(_yaml_path([*where, name]), "is required"), name not in misspelt
    elif error.validator == "pattern":
        pattern = str(error.validator_value)
        rule = _PATTERN_RULES.get(pattern, f"must match {pattern}")
        key = "propertyNames" in error.schema_path
        yield ConfigProblem(_yaml_path(where), f"key {error.instance!r} {rule}" if key else rule), True
    elif not where and error.validator == "type":
        yield (
            ConfigProblem(
                "(top level)", "must be a mapping of settings (public_url:, provider:, brands:, …)"
            ),
            True,
        )
    else:
        yield ConfigProblem(_yaml_path(where), error.message), True


_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _position(raw: Any, path: str) -> tuple[int, ...]:
    """Where ``path`` sits in the document (a parsed YAML mapping keeps its order), to list problems
    top to bottom; a key that is missing sorts after its present siblings."""
    position: list[int] = []
    node = raw
    for index, key in _PATH_PART.findall(path):
        if index:
            position.append(int(index))
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        elif isinstance(node, dict):
            keys = list(node)
            position.append(keys.index(key) if key in node else len(keys))
            node = node.get(key)
        else:
            position.append(0)
            node = None
    return tuple(position)


class _Problems:
    """The problems found so far in one document, and which of its parts are too malformed to check.

    The semantic rules run only on parts the schema found well-formed: a rule reading a value of
    the wrong shape would only repeat the schema's problem, or fail in a way that says nothing.
    """

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        validator = jsonschema.Draft202012Validator(SCHEMA)
        schema = dict(pair for error in validator.iter_errors(raw) for pair in _schema_problem(error))
        self._malformed = list(schema)
        self.found = [problem for problem, told in schema.items() if told]

    def broken(self, path: str) -> bool:
        """The value at ``path`` itself may be of the wrong shape: a problem is there or above it."""
        return any(
            path == bad.path or path.startswith((f"{bad.path}.", f"{bad.path}[")) for bad in self._malformed
        )

    def touched(self, path: str) -> bool:
        """A problem is at, above or anywhere under ``path``."""
        return self.broken(path) or any(
            bad.path.startswith((f"{path}.", f"{path}[")) for bad in self._malformed
        )

    def attempt(
        self, path: str, build: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> _T | None:
        """``build(*args, **kwargs)``; ``None`` when it found a problem (noted), or was not run on a
        malformed ``path``."""
        if self.touched(path):
            return None
        try:
            return build(*args, **kwargs)
        except ConfigError as error:
            self.found.extend(error.problems)
            return None

    def note(self, path: str, reason: str) -> None:
        self.found.append(ConfigProblem(path, reason))

    def error(self) -> ConfigError:
        """Every problem found, top to bottom as in the document."""
        return ConfigError.of(sorted(self.found, key=lambda problem: _position(self._raw, problem.path)))
