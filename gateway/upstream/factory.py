"""``make_adapter``: a Brand's ``upstream.adapter`` turned into the module that speaks to its bot."""

from __future__ import annotations

from typing import assert_never

from gateway.config import BrandConfig, CacheConfig
from gateway.ops.metrics import Metrics
from gateway.store.adapter_state import AdapterState
from gateway.upstream.base import BotAdapter
from gateway.upstream.client import BotClient
from gateway.upstream.directline import DirectLineAdapter
from gateway.upstream.http_json import HttpJsonAdapter
from gateway.upstream.http_mapping import HttpMappingAdapter
from gateway.upstream.openai import OpenAIAdapter
from gateway.upstream.rasa import RasaAdapter

__all__ = ["make_adapter"]


def make_adapter(
    brand: BrandConfig, client: BotClient, state: AdapterState, *, cache: CacheConfig, metrics: Metrics
) -> BotAdapter:
    """The adapter for ``brand``'s bot, on the process's shared ``client`` (it keeps no cookies).

    ``state`` is where an adapter keeps what a conversation needs between turns, with
    ``cache.conversation_ttl`` as its lifetime; the stateless adapters take neither, nor ``metrics``
    (``directline`` counts the messages a bot sent after its turn there).
    The caller wraps the result in the guard (gateway/upstream/guard.py).
    """
    upstream = brand.upstream
    if upstream.adapter == "pact":
        return HttpJsonAdapter(upstream, client)
    if upstream.adapter == "rasa":
        return RasaAdapter(upstream, client)
    if upstream.adapter == "http":
        return HttpMappingAdapter(upstream, client)
    if upstream.adapter == "openai":
        return OpenAIAdapter(upstream, client, state, cache=cache)
    if upstream.adapter == "directline":
        return DirectLineAdapter(upstream, client, state, cache=cache, metrics=metrics)
    assert_never(upstream.adapter)  # mypy checks every adapter the configuration allows has a branch
