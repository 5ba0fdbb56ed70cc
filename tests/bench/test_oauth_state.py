"""``python -m bench oauth_state`` runs at a tiny size and prints each figure beside its target.

What is asserted is that both stores ran and printed their lines, and the count: refreshing adds no
record.
It needs Redis (the database ``PACT_TEST_REDIS_URL`` names) and fails, never skips, without it.
"""

from __future__ import annotations

import re

from tests.support.bench import BENCH_REDIS_URL, run_module


def test_oauth_state_front_prints_every_figure_beside_its_target() -> None:
    out = run_module(
        "bench",
        "oauth_state",
        "--grants", "2", "--refreshes", "3",
        "--redis-url", BENCH_REDIS_URL,
        timeout=120,
    )  # fmt: skip
    for front in ("memory", "redis"):
        records = re.search(
            rf"^{front}: records per grant ([\d.]+) after 0 refreshes, ([\d.]+) after 3", out, re.M
        )
        assert records is not None, out
        assert records[1] == records[2]
    assert re.search(r"^redis: bytes per grant [\d,]+ ", out, re.M), out
