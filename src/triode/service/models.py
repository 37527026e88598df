"""What the turn service needs of the models: the one a request names, and a lease on it.

The models registry (`actors.models.ModelsHandle`) is the server's: it loads a model when
asked for and never unloads it while a lease holds it. `FixedModel` is one model actor
already running, without a registry (the service tests' fake model, tools that start a
model actor themselves).
"""

from __future__ import annotations

import math
from typing import Protocol

from ..actors.model import ModelHandle
from ..actors.models import ModelView
from ..errors import ModelBusy, NotFound
from ..model.catalog import ModelSpec, source_names
from ..responses import translate
from ..tenants import Caller


class ModelLease(Protocol):
    """A hold on a loaded model until `release` (idempotent)."""

    @property
    def handle(self) -> ModelHandle: ...

    async def release(self) -> None: ...


class Models(Protocol):
    def find(self, name: str, caller: Caller | None = None) -> ModelSpec: ...

    async def acquire(self, spec: ModelSpec, *, keep_alive: float | None = None,
                      timeout: float = math.inf, autoload: bool | None = None,
                      early: bool = False) -> ModelLease: ...


class _Held:
    def __init__(self, handle: ModelHandle):
        self.handle = handle

    async def release(self) -> None:
        return None


class FixedModel:
    """One running model actor, answering to `names`, always loaded: a lease on it holds
    nothing, and it cannot be unloaded. Answers what the HTTP layer asks a models registry
    (`views`, `lookup`, ...) as a lone pinned model."""

    def __init__(self, handle: ModelHandle, names: tuple[str, ...]):
        self._handle = handle
        self.spec = ModelSpec(names=names or source_names(handle.info.path),
                              source=handle.info.path, pinned=True, keep_alive=-1.0)
        self.specs = (self.spec,)

    @property
    def default(self) -> ModelSpec:
        return self.spec

    def find(self, name: str, caller: Caller | None = None) -> ModelSpec:
        translate.check_model(name, self.spec.names)
        return self.spec

    def lookup(self, model_id: str, caller: Caller | None) -> ModelSpec:
        if model_id not in self.spec.names:
            raise NotFound(f"The model '{model_id}' does not exist", param="model",
                           code="model_not_found")
        return self.spec

    async def views(self) -> list[ModelView]:
        return [ModelView(spec=self.spec, status="loaded", error=None, memory_bytes=0,
                          measured=False, reserved_bytes=0, leases=0, waiting=0, loads=1, load_seconds=None,
                          loaded_at=None, idle_seconds=None, expires_at=None,
                          keep_alive=-1.0, info=self._handle.info,
                          statistics=await self._handle.statistics())]

    async def load(self, spec: ModelSpec) -> None:
        return None

    async def unload(self, spec: ModelSpec) -> None:
        raise ModelBusy("this model is fixed in this process; it cannot be unloaded",
                        param="model")

    async def acquire(self, spec: ModelSpec, *, keep_alive: float | None = None,
                      timeout: float = math.inf, autoload: bool | None = None,
                      early: bool = False) -> ModelLease:
        return _Held(self._handle)
