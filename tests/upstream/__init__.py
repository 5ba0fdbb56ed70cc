"""The bot adapters: the native HTTP+JSON contract."""
