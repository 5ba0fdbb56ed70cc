"""pact-gateway: a PACT 1.0 (A2A 1.0 HTTP+JSON) authentication gateway in front of an existing support bot."""

__version__ = "0.2.0"
