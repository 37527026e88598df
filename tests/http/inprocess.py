"""The Quart app in process: `create_app` over the turn service's real actors and a fake
model (tests/service/conftest.py), driven by Quart's test client (no server, no socket)."""

from __future__ import annotations

from typing import Any

import trio

from triode.service.conversations import Conversations
from triode.service.models import FixedModel
from triode.system import Handles
from triode.tenants import Tenants, single

from ..service.conftest import MODEL, FakeModel, start_service

__all__ = ["MODEL", "handles_for"]


async def handles_for(nursery: trio.Nursery, *, api_key: str | None = None,
                      model: FakeModel | None = None, **service: Any) -> Handles:
    """The handles `create_app` takes, over a fresh service started in `nursery`."""
    started = await start_service(nursery, model=model, **service)
    return Handles(turns=started.turns, conversations=Conversations(started.conversations),
                   models=FixedModel(started.model, (MODEL,)),  # type: ignore[arg-type]
                   registry=started.registry, stores=started.stores, blas="test",
                   tenants=Tenants(single(api_key)))
