"""The store actors' handles as the services hold them, and the one place a caller's view of
them is made (`Stores.of`): the same actors, every name scoped to the caller's tenant
(tenants.scoped), so its ids, items, conversations and reasoning are its own and every other
tenant's are not found."""

from __future__ import annotations

import attrs

from ..actors.store import ConversationStoreHandle, ReasoningEchoHandle, ResponseStoreHandle
from ..tenants import Caller


@attrs.frozen
class Stores:
    responses: ResponseStoreHandle
    conversations: ConversationStoreHandle
    reasoning: ReasoningEchoHandle   # the reasoning echo

    def of(self, caller: Caller) -> Stores:
        """The handles that read and write `caller`'s names (cheap: three small values)."""
        if caller.scope == self.responses.scope:
            return self
        return Stores(attrs.evolve(self.responses, scope=caller.scope),
                      attrs.evolve(self.conversations, scope=caller.scope),
                      attrs.evolve(self.reasoning, scope=caller.scope))
