"""bench.harness: the one gateway configuration every bench front writes."""

from __future__ import annotations

from bench.harness import MEMORY_MAX_ENTRIES, gateway_yaml


def test_a_memory_gateway_runs_with_the_bench_bound_unless_the_front_sets_its_own() -> None:
    """Issue 29 item 4: a front that opens conversations sets the memory store's bound for the run."""

    def cache(block: dict[str, object]) -> object:
        return gateway_yaml(8080, {"keys": []}, {"url": "http://127.0.0.1:1/chat"}, block)["cache"]

    assert cache({"url": "memory://"}) == {"max_entries": MEMORY_MAX_ENTRIES, "url": "memory://"}
    assert cache({"url": "memory://", "max_entries": 3000}) == {"max_entries": 3000, "url": "memory://"}
    assert cache({"url": "redis://127.0.0.1:6379/14"}) == {"url": "redis://127.0.0.1:6379/14"}
