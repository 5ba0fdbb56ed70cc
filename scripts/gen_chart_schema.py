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

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a file, the gateway package sits beside this folder
    sys.path.insert(0, str(REPO_ROOT))

import generated  # noqa: E402 - scripts/generated.py, beside this file

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
    return generated.main(
        argv,
        description=__doc__.splitlines()[0],
        default=CHART_SCHEMA,
        render=lambda current: render(json.loads(current)),
        script="scripts/gen_chart_schema.py",
        unreadable="cannot read it as the chart's values schema",
    )


if __name__ == "__main__":
    sys.exit(main())
