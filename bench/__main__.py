"""``python -m bench FRONT [options]``: the one entry; each front is a module with ``main(argv)``.

A new front is one line of :data:`FRONTS` (its name and the question it answers) and the module
``bench.FRONT`` whose ``main`` prints its figures beside their targets; ``tests/bench`` runs it at a
tiny size.
"""

import importlib
import sys

FRONTS: dict[str, str] = {
    "throughput": "cost against the bare pass-through, delegated, adapters (performance.md)",
    "adapters": "each bot adapter's cost per turn beside pact's (performance.md)",
    "turn_count": "instructions per Identity turn against bench/baselines.json (the CI guard)",
    "slow_bot": "thousands of slow turns in flight, one primary vs three (capacity.md)",
    "redis_bytes": "Redis bytes per conversation, per shard of a cluster (capacity.md)",
    "memory": "memory-store bytes per conversation; --at-bound: collector pauses at the bound (capacity.md)",
    "soak": "memory and descriptors after steady load (reliability.md)",
}
"""Each front (its module is ``bench.FRONT``) and the question it answers."""


def main(argv: list[str]) -> int:
    """Run ``FRONT``'s ``main`` with the rest of ``argv``; else list the fronts (exit 0 for ``--help``)."""
    if not argv or argv[0] not in FRONTS:
        asked = argv[:1] in (["-h"], ["--help"])
        lines = [f"  {name:<12} {question}" for name, question in FRONTS.items()]
        usage = "usage: python -m bench FRONT [options]   (python -m bench FRONT --help: its options)"
        print("\n".join([usage, *lines]), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    status = importlib.import_module(f"bench.{argv[0]}").main(argv[1:])
    return int(status or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
