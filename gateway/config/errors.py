"""What is wrong with a configuration file: each problem (the YAML path of the bad value and why),
and the one error that carries them all.

A module of its own because every step raises it and none owns it: reading the file
(:mod:`gateway.config.document`), the schema pass (:mod:`gateway.config.problems`) and the semantic
rules (:mod:`gateway.config.build`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a file: the YAML path of the bad value (empty for the file as a whole) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


class ConfigError(ValueError):
    """A configuration file that cannot be served, with every problem found in it (``problems``).

    ``path`` (the YAML path of the bad value) and ``reason`` are the first problem's.
    """

    def __init__(self, path: str, reason: str, *more: ConfigProblem) -> None:
        self.problems = (ConfigProblem(path, reason), *more)
        super().__init__("; ".join(map(str, self.problems)))
        self.path = path
        self.reason = reason

    @classmethod
    def of(cls, problems: Sequence[ConfigProblem]) -> ConfigError:
        first, *more = problems
        return cls(first.path, first.reason, *more)
