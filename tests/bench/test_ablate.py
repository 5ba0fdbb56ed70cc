"""``bench.ablate``: every ablation still answers turns, so what it counts is a working gateway.

An ablation that broke the turn (an error answer, a skipped bot call) would be counted as a
saving it is not. The counting itself runs under callgrind and is not repeated here; each
ablation is applied to an in-process gateway and driven through HTTP as a client would.
"""

from __future__ import annotations

import pytest

from bench.ablate import ABLATIONS
from tests.support.gateway import MakeGateway


@pytest.mark.parametrize("name", list(ABLATIONS))
async def test_a_gateway_without_the_part_still_runs_a_conversation(
    name: str, make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    ablation = ABLATIONS[name]()
    monkeypatch.setattr(ablation.target, ablation.attribute, ablation.replacement)
    gw = await make_gateway()

    first = await gw.send("Where is my order?")
    assert first.status == 200, await first.text()
    context_id = (await first.json())["message"]["contextId"]
    second = await gw.send("And the invoice?", context_id=context_id)
    assert second.status == 200, await second.text()
    assert (await second.json())["message"]["contextId"] == context_id
    assert len(gw.bot.calls) == 2  # both turns reached the bot


def test_every_ablation_replaces_an_attribute_that_exists() -> None:
    for name, build in ABLATIONS.items():
        ablation = build()
        assert hasattr(ablation.target, ablation.attribute), name
        assert getattr(ablation.target, ablation.attribute) is not ablation.replacement, name
        assert ablation.leaves_out
