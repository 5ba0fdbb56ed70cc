"""Shared state behind one interface: conversations, stored replies and in-flight markers (§4.2, §4.3)."""

from gateway.store.base import ConversationStore, Owner, StoreError, TurnClaim, TurnStatus
from gateway.store.factory import open_store

__all__ = ["ConversationStore", "Owner", "StoreError", "TurnClaim", "TurnStatus", "open_store"]
