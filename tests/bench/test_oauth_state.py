"""``python -m bench oauth_state`` runs at a tiny size and prints each figure beside its target.

Figures are not judged here (timings on a CI machine are noise); what is asserted is that every
front ran and printed its lines, and the counts that are not timings: refreshing adds no record.
It needs Redis (the database ``PACT_TEST_REDIS_URL`` names) and fails, never skips, without it.
"""

from __future__ import annotations

import re

from tests.support.bench import BENCH_REDIS_URL, run_module


def test_oauth_state_front_prints_every_figure_beside_its_target() -> None:
    out = run_module(
        "bench",
        "oauth_state",
        "--prior", "20", "--reads", "5", "--memory-reads", "5", "--repeats", "1",
        "--grants", "2", "--refreshes", "3",
        "--redis-url", BENCH_REDIS_URL,
        timeout=120,
    )  # fmt: skip
    for front in ("memory", "redis"):
        assert re.search(
            rf"^{front}: consent hand-off store reads .* ratio [\d.]+, target <= 1.2", out, re.M
        ), out
        records = re.search(
            rf"^{front}: records per grant ([\d.]+) after 0 refreshes, ([\d.]+) after 3", out, re.M
        )
        assert records is not None, out
        assert records[1] == records[2]
    assert re.search(r"^redis: bytes per grant [\d,]+ ", out, re.M), out
