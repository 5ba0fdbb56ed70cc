"""Write the ``config`` property of the Helm chart's values.schema.json from the gateway's own schema.

One source: ``gateway.config.SCHEMA`` is what ``pact-gateway serve`` and ``check-config`` validate
config.yaml against, and the chart's ``config`` value *is* that config.yaml, so helm validates it
against the same schema and ``helm install`` refuses a config the gateway would refuse to start
with (an unknown key such as ``brnads:`` included), instead of rendering a pod that crash-loops.

    python scripts/gen_chart_schema.py            # rewrite the chart's values.schema.json
    python scripts/gen_chart_schema.py --check    # exit 1 when it is out of date (CI, tests)

Only ``properties.config`` and ``$schema`` are written; every other value's schema is the chart's
own and edited by hand. Exit status: 0 up to date (or written), 1 out of date, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a file, the gateway package sits beside this folder
    sys.path.insert(0, str(REPO_ROOT))

from gateway.config import SCHEMA  # noqa: E402 - needs the path set above

CHART_SCHEMA = REPO_ROOT / "deploy" / "helm" / "pact-gateway" / "values.schema.json"

DRAFT = str(jsonschema.Draft202012Validator.META_SCHEMA["$id"])
"""The draft gateway.config validates with; helm must read the copied keywords the same way."""

GENERATED_BY = "Generated from gateway.config.SCHEMA by scripts/gen_chart_schema.py; do not edit by hand."
DESCRIPTION = (
    "The gateway's config.yaml, checked against the gateway's own schema; the chart fills in "
    "listen.port and metrics.port from containerPorts when unset."
)


def config_schema() -> dict[str, Any]:
    """``SCHEMA`` as JSON (tuples become lists), with a note of where it came from.

    Its top-level ``required`` is left out: values.yaml's ``config`` is empty on purpose (helm would
    merge example data into a real config), and the chart's template refuses a config missing those
    keys with a message that points at values-example.yaml, where helm's schema error would only
    say "missing property". Deeper ``required`` lists stay.
    """
    copied: dict[str, Any] = json.loads(json.dumps(SCHEMA))
    copied.pop("required", None)
    return {"$comment": GENERATED_BY, "description": DESCRIPTION, **copied}


def render(values_schema: dict[str, Any]) -> str:
    """The chart's values.schema.json text with ``config`` (and the draft) replaced."""
    updated = dict(values_schema)
    updated["$schema"] = DRAFT
    properties = dict(updated["properties"])
    properties["config"] = config_schema()
    updated["properties"] = properties
    return json.dumps(updated, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the file is up to date")
    parser.add_argument("--file", type=Path, default=CHART_SCHEMA, help="the values.schema.json to update")
    args = parser.parse_args(argv)
    path: Path = args.file
    try:
        current = path.read_text(encoding="utf-8")
        wanted = render(json.loads(current))
    except (OSError, ValueError, KeyError) as error:
        print(f"{path}: cannot read it as the chart's values schema ({error})", file=sys.stderr)
        return 2
    if current == wanted:
        return 0
    if args.check:
        print(
            f"{path} is out of date with gateway.config.SCHEMA: run python scripts/gen_chart_schema.py",
            file=sys.stderr,
        )
        return 1
    path.write_text(wanted, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
