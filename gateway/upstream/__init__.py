"""Adapters from a PACT turn to a Brand's existing bot, one module per bot API."""

from gateway.upstream.base import BotAdapter, BotBusy, BotReply, Turn, UpstreamError

__all__ = ["BotAdapter", "BotBusy", "BotReply", "Turn", "UpstreamError"]
