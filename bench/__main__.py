"""``python -m bench`` runs the benchmark (:mod:`bench.run`); ``python -m bench soak …`` the soak;
``python -m bench capacity NAME …`` one capacity front (issue 17, cited in ``docs/capacity.md``).

Each capacity front is a module of its own with ``main(argv)``, so a question asked of the gateway's
capacity is answered by one module and the dispatch below stays a table.
"""

import importlib
import sys

from bench import run, soak

# capacity NAME -> the module that answers it; each prints its figures beside the targets.
CAPACITY: dict[str, str] = {
    "gc_pause": "bench.gc_pause",
    "oauth_state": "bench.oauth_state",
    "owner_scale": "bench.owner_scale",
    "redis_bytes": "bench.redis_bytes",
    "slow_bot": "bench.slow_bot",
}


def capacity(argv: list[str]) -> int:
    """Run ``python -m bench capacity NAME …``; with no name, list the fronts."""
    if not argv or argv[0] not in CAPACITY:
        names = ",".join(sorted(CAPACITY))
        print(f"usage: python -m bench capacity {{{names}}} [options]", file=sys.stderr)
        return 2
    status = importlib.import_module(CAPACITY[argv[0]]).main(argv[1:])
    return int(status or 0)


if sys.argv[1:2] == ["soak"]:
    raise SystemExit(soak.main(sys.argv[2:]))
if sys.argv[1:2] == ["capacity"]:
    raise SystemExit(capacity(sys.argv[2:]))
raise SystemExit(run.main())
