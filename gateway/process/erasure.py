"""A person's conversations as an operator handles them: listed, closed, or erased; each action audited.

One service for the admin API (:mod:`gateway.process.admin`) and the CLI
(:mod:`gateway.conversations_cli`). A person is who a conversation belongs to (§4.2): a Brand, a
personal agent (its issuer) and the ``sub`` it signs for, which is exactly an
:class:`~gateway.store.base.Owner`. Erasing them removes, at that Brand:

* every conversation of theirs the store holds (:mod:`gateway.store.admin`): its turns and stored
  replies (receipts included), the first-message records of its messages (§4.3), the state bot
  adapters keep for it; a turn running at that moment stores no reply, and each ``contextId``
  answers as an unknown one from then on;
* their §6 ``per_user`` rate-limit counter (``per_agent`` is the personal agent's own, not theirs);
* every live §5 grant issued to them (by whichever Brand user approved it), revoked as
  ``POST …/oauth/revoke`` would: their delegation and refresh tokens stop working at once;
* every device authorization of theirs still pending, or approved and not yet redeemed (a grant
  in waiting: the next poll would mint it), denied, with who approved it and what: its poll hears
  ``access_denied`` (RFC 8628 §3.5; not ``expired_token``, which invites the agent to start over
  at once, when what happened is a refusal). They are denied *before* the grants are read, so an
  authorization redeemed while the erasure runs is a grant that the erasure then revokes.

What it leaves, and why that is safe: a denied authorization's record (owner digest, client,
requested scopes, no user) lapses on its own (``expires_in`` plus
:data:`~gateway.store.oauth.EXPIRED_KEPT`); a revoked grant's
refresh-token records hold only the grant's id, and the Brand user's list of grants only ids,
both dropped as they are next read or expire; logs and metrics never held the ``sub`` or a text.
What the Brand's bot keeps on its side is the Brand's to erase. A conversation opened while the
erasure runs is not part of it.

The audit line (logger ``pact_gateway.audit``, INFO) names the action, where it came from (``api``
or ``cli``), the Brand, the personal agent, the person as ``sub_hash`` (the access log's
:func:`~gateway.ops.logs.sub_digest`, so their requests can be found), and what was found or
removed: never the ``sub`` itself, a text, or a Brand user id.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from gateway.ops.limits import person_counters
from gateway.ops.logs import sub_digest
from gateway.store.admin import ConversationAdmin, ConversationInfo, Erased
from gateway.store.base import Owner
from gateway.store.oauth import Grant, OAuthStore
from gateway.upstream import directline, openai

__all__ = ["ADAPTER_STATE_NAMES", "AUDIT_LOGGER", "Erasure", "PersonRecords"]

AUDIT_LOGGER: Final = "pact_gateway.audit"
ADAPTER_STATE_NAMES: Final = (openai.STATE_NAME, directline.STATE_NAME)
"""Every name a bot adapter keeps per-conversation state under (:func:`gateway.store.keys.adapter_key`)."""

log = logging.getLogger(AUDIT_LOGGER)

Via = Literal["api", "cli"]


@dataclass(frozen=True, slots=True)
class Erasure:
    """What erasing one person removed."""

    stored: Erased
    grants_revoked: int
    authorizations_denied: int

    def counts(self) -> dict[str, int]:
        """Every count by name, as the API answers and the audit line and the CLI print them."""
        counts = dataclasses.asdict(self.stored)
        counts["rate_limit_counters"] = counts.pop("counters")
        counts["grants_revoked"] = self.grants_revoked
        counts["authorizations_denied"] = self.authorizations_denied
        return counts


class PersonRecords:
    """List, close and erase a person's conversations in one store, writing an audit line for each.

    ``clock`` is the store's (grants are live or not by it); ``via`` says in the audit line where
    the operator acted from.
    """

    def __init__(
        self, admin: ConversationAdmin, oauth: OAuthStore, clock: Callable[[], float], *, via: Via
    ) -> None:
        self._admin = admin
        self._oauth = oauth
        self._clock = clock
        self._via = via

    def _audit(self, message: str, person: Owner, action: str, **fields: object) -> None:
        log.info(
            message,
            extra={
                "action": action,
                "via": self._via,
                "brand": person.brand_id,
                "pa_issuer": person.issuer,
                "sub_hash": sub_digest(person.issuer, person.sub),
                **fields,
            },
        )

    async def conversations(self, person: Owner) -> list[ConversationInfo]:
        found = await self._admin.conversations(person)
        self._audit("listed a person's conversations", person, "list", conversations=len(found))
        return found

    async def grants(self, person: Owner) -> list[Grant]:
        """The person's live §5 grants at their Brand (those issued to this personal agent and ``sub``),
        oldest first."""
        found = await self._oauth.grants_of_owner(person.brand_id, person.digest, self._clock())
        self._audit("listed a person's grants", person, "grants", grants=len(found))
        return found

    async def close(self, person: Owner, context_id: str) -> bool:
        closed = await self._admin.close(person, context_id)
        self._audit("closed a conversation", person, "close", context_id=context_id, found=closed)
        return closed

    async def erase(self, person: Owner) -> Erasure:
        stored = await self._admin.erase(person, person_counters(person))
        # Authorizations first: one redeemed meanwhile is a grant the lines below find and revoke.
        denied = await self._oauth.deny_authorizations_of_owner(person.brand_id, person.digest, self._clock())
        grants = await self._oauth.grants_of_owner(person.brand_id, person.digest, self._clock())
        revoked = 0
        for grant in grants:
            revoked += await self._oauth.revoke_grant(person.brand_id, grant.grant_id)
        erasure = Erasure(stored, revoked, denied)
        self._audit("erased a person's conversations and grants", person, "erase", **erasure.counts())
        return erasure
