"""Adapters from a PACT turn to a Brand's existing bot, one module per bot API."""

from gateway.upstream.base import BotAdapter, BotReply, Turn, UpstreamError

__all__ = ["BotAdapter", "BotReply", "Turn", "UpstreamError"]
