"""Write the key-by-key part of docs/configuration.md from the gateway's own schema.

One source: ``gateway.config.SCHEMA`` is what ``pact-gateway serve`` and ``check-config`` validate
config.yaml against, and what scripts/gen_chart_schema.py copies into the Helm chart's
values.schema.json, so the reference, the chart and the gateway cannot disagree on a key, its type
or its bounds. The schema carries no prose and no defaults: the defaults are read from the
configuration's dataclasses (the values a key left out takes), and the prose above the generated
part of the page is written by hand.

    python scripts/gen_config_reference.py            # rewrite the generated part
    python scripts/gen_config_reference.py --check    # exit 1 when it is out of date (CI, tests)

Everything above the ``MARKER`` line of the page is kept as it is. Exit status: 0 up to date (or
written), 1 out of date, 2 a usage error.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a file, the gateway package sits beside this folder
    sys.path.insert(0, str(REPO_ROOT))

import generated  # noqa: E402 - scripts/generated.py, beside this file

from gateway import config  # noqa: E402 - needs the path set above

REFERENCE = REPO_ROOT / "docs" / "configuration.md"

MARKER = (
    "<!-- Generated below from gateway.config.SCHEMA by scripts/gen_config_reference.py; "
    "do not edit by hand. -->"
)

INTRO = """## Every key

Each key of the file, its type, the value it takes when left out, and what the gateway checks it
against (a file breaking one is refused at start-up with the key's YAML path). `[]` marks a list's
items. A default of "—" means the key has none of its own: it is required where the last column
says so, and otherwise the prose above says what leaving it out does.
"""

_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}


def _type(node: Mapping[str, Any]) -> str:
    if "enum" in node:
        return "one of " + ", ".join(f"`{value}`" for value in node["enum"])
    kind = node.get("type")
    if kind == "array":
        return "list"
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            return f"mapping of name to {_type(extra)}"
        return "mapping"
    if isinstance(kind, str):
        return _TYPES.get(kind, kind)
    return "any YAML value"


def _constraints(node: Mapping[str, Any], required: bool) -> str:
    rules = ["required"] if required else []
    if "minimum" in node:
        rules.append(f"≥ {node['minimum']}")
    if "exclusiveMinimum" in node:
        rules.append(f"> {node['exclusiveMinimum']}")
    if "maximum" in node:
        rules.append(f"≤ {node['maximum']}")
    if node.get("type") == "string" and node.get("minLength", 0) == 1 and "maxLength" not in node:
        rules.append("not empty")
    elif "maxLength" in node:
        rules.append(f"{node.get('minLength', 0)} to {node['maxLength']} characters")
    if "pattern" in node:
        rules.append(config._PATTERN_RULES.get(node["pattern"], f"matches `{node['pattern']}`"))
    if "minItems" in node:
        rules.append(f"at least {node['minItems']} item{'s' if node['minItems'] != 1 else ''}")
    if "minProperties" in node:
        rules.append(f"at least {node['minProperties']} entry")
    names = node.get("propertyNames", {})
    if "pattern" in names:
        rules.append(
            "each name " + config._PATTERN_RULES.get(names["pattern"], f"matches `{names['pattern']}`")
        )
    return "; ".join(rules)


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field's type names, through ``X | None``."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _defaults(source: Any) -> dict[str, Any]:
    """Key → what a file leaving it out gets, from a dataclass (its defaults) or an instance of one.

    A nested dataclass is returned as such (an instance when the default builds one, else its
    class) so the walk goes on into it; a field without a default is left out.
    """
    cls = source if isinstance(source, type) else type(source)
    try:
        hints = typing.get_type_hints(cls)
    except NameError:  # a type only imported for the type checker: no defaults below it
        hints = {}
    found: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if not isinstance(source, type):
            value = getattr(source, field.name)
        elif field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            value = dataclasses.MISSING
        nested = _dataclass_of(hints.get(field.name))
        if value is None or value is dataclasses.MISSING:
            if nested is not None:
                found[field.name] = nested
            elif value is None:
                found[field.name] = None
            continue
        found[field.name] = value
    return found


def _shown(value: Any) -> str:
    if value is dataclasses.MISSING or value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, int | str):
        return f"`{value}`"
    if isinstance(value, tuple | list | Mapping) and not value:
        return "none"
    return "—"


def _rows(node: Mapping[str, Any], path: str, defaults: Any, seen: dict[int, str]) -> Iterator[str]:
    """One table row per key below ``node``; a block met before (the same schema object, as a
    Brand's ``rate_limits`` is the top level's) is one row naming where its keys are listed."""
    properties: Mapping[str, Any] = node.get("properties", {})
    required = set(node.get("required", ()))
    known = _defaults(defaults) if defaults is not None else {}
    for name, child in properties.items():
        key = f"{path}.{name}" if path else name
        default = known.get(name, dataclasses.MISSING)
        shown = "—" if isinstance(default, type) or dataclasses.is_dataclass(default) else _shown(default)
        items = child.get("items") if child.get("type") == "array" else None
        if id(child) in seen and child.get("properties"):
            yield f"| `{key}` | mapping | — | the same keys as `{seen[id(child)]}` |"
            continue
        yield f"| `{key}` | {_type(child)} | {shown} | {_constraints(child, name in required)} |"
        nested = default if dataclasses.is_dataclass(default) else None
        if child.get("properties"):
            seen[id(child)] = key
            yield from _rows(child, key, nested, seen)
        elif isinstance(items, Mapping) and items.get("properties"):
            seen[id(items)] = f"{key}[]"
            yield from _rows(items, f"{key}[]", _item_defaults(defaults, name), seen)


def _item_defaults(parent: Any, name: str) -> type | None:
    """The dataclass a list's items are read into (``brands`` → BrandConfig), if the parent says."""
    cls = parent if isinstance(parent, type) else type(parent) if parent is not None else None
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    try:
        hint = typing.get_type_hints(cls).get(name)
    except NameError:
        return None
    for arg in typing.get_args(hint):
        found = _dataclass_of(arg)
        if found is not None:
            return found
    return None


def render_reference() -> str:
    """The generated part of the page: the marker, a short preface and the table of every key."""
    lines = [MARKER, "", INTRO, "| Key | Type | Default | Checked |", "| - | - | - | - |"]
    lines.extend(_rows(config.SCHEMA, "", config.GatewayConfig, {}))
    return "\n".join(lines) + "\n"


def render(current: str) -> str:
    """``current`` with everything from the marker on replaced (appended when it has none)."""
    head = current.split(MARKER, 1)[0].rstrip("\n")
    return f"{head}\n\n{render_reference()}"


def main(argv: list[str] | None = None) -> int:
    return generated.main(
        argv,
        description=__doc__.splitlines()[0],
        default=REFERENCE,
        render=render,
        script="scripts/gen_config_reference.py",
        unreadable="cannot read it",
    )


if __name__ == "__main__":
    sys.exit(main())
