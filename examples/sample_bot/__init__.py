"""A small order-status support bot speaking the gateway's bot contract (see the README)."""

from examples.sample_bot.bot import ORDER_DETAIL, ORDERS, create_bot_app

__all__ = ["ORDERS", "ORDER_DETAIL", "create_bot_app"]
