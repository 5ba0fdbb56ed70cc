"""The ``--serve`` launch convention of the bench tools that prepare a gateway process before it serves."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import pytest

from bench import ablate, rate_scan
from bench.procs import serve_request, served_through


def test_a_served_gateway_gets_back_exactly_the_cli_arguments_it_was_given() -> None:
    argv = served_through("bench.ablate", "guard", ["-m", "gateway", "serve", "--config", "g.yaml"])
    assert argv == ["-m", "bench.ablate", "--serve", "guard", "--", "serve", "--config", "g.yaml"]
    assert serve_request(argv[2:], "usage") == ("guard", ["serve", "--config", "g.yaml"])


def test_arguments_without_serve_are_left_to_the_tool() -> None:
    assert serve_request(["--turns", "20"], "usage") is None
    assert serve_request([], "usage") is None


@pytest.mark.parametrize("args", [["--serve"], ["--serve", "guard"], ["--serve", "guard", "serve"]])
@pytest.mark.parametrize("main", [ablate.main, rate_scan.main])
def test_a_malformed_serve_request_is_a_usage_error(
    args: list[str], main: Callable[[Sequence[str] | None], int]
) -> None:
    with pytest.raises(SystemExit, match="usage: python -m bench"):
        main(args)


def test_ablate_refuses_an_ablation_it_does_not_have() -> None:
    with pytest.raises(SystemExit, match=re.escape("usage: python -m bench.ablate --serve")):
        ablate.main(["--serve", "no-such-part", "--", "serve"])
