"""The turn service in process: the real registry and store actors (over memory Entries), a
fake model handle, trio's MockClock."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

import attrs
import pytest
import trio
from trio.testing import MockClock

from triode.actors.jobs import JobBoardHandle
from triode.actors.registry import Registry, RegistryHandle
from triode.actors.store import (ConversationStore, ConversationStoreHandle,
                                 ReasoningEchoHandle, ReasoningEchoStore, ResponseStore,
                                 ResponseStoreHandle)
from triode.actors.messages import (GenerationStatistics, HistogramStatistics, ModelStatistics,
                                    PromptCacheStatistics)
from triode.errors import StoreUnavailable
from triode.model.engine import StepOutput
from triode.model.loading import ModelInfo
from triode.model.request import GenerationRequest, Rendered
from triode.responses.convert import structure
from triode.responses.objects import plain
from triode.responses.wire import CreateResponse
from triode.service.models import FixedModel
from triode.service.background import Jobs
from triode.service.keeping import ResponseKeeper
from triode.service.media import Media
from triode.service.prepare import Preparer
from triode.service.stores import Stores
from triode.service.turns import Turns
from triode.storage.backend import Backend, Entries
from triode.storage.memory import MEMORY, MemoryBackend
from triode.storage.records import StoredResponse
from triode.tenants import DEFAULT_CALLER as CALLER  # noqa: F401  (the tests import it)

MODEL = "fake"


@pytest.fixture
def clock() -> MockClock:
    return MockClock(autojump_threshold=0)


def tokens_of(text: str) -> list[int]:
    """The fake tokenizer: one token per whitespace-separated word."""
    return list(range(len(text.split())))


class FakeTokenizer:
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return tokens_of(text)


@attrs.frozen
class FakeAdmission:
    uid: int
    outputs: AsyncIterator[StepOutput]


class FakeModel:
    """What the turn service, the Supervisor and the figures use of a ModelHandle. `render`
    writes the chat as JSON (a token per word); `generate` answers `reply`, a word per step,
    and when `hold` is set it stops after the first word until the event is set;
    `statistics` reports `alive` as the engine's state and the generations so far."""

    def __init__(self, *, context_length: int = 4096, reply: str = "hello there") -> None:
        self.info = ModelInfo(path=MODEL, context_length=context_length, eos_token_ids=(0,),
                              vocab_size=8)
        self.tokenizer = FakeTokenizer()
        self.reply = reply
        self.hold: trio.Event | None = None
        self.generated: list[GenerationRequest] = []
        self.alive = True

    async def render(self, messages: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None = None,
                     template_kwargs: dict[str, Any] | None = None, *, submits: bool = True
                     ) -> Rendered:
        text = json.dumps({"messages": messages, "tools": tools or None})
        return Rendered(tokens_of(text), text)

    @asynccontextmanager
    async def generate(self, request: GenerationRequest) -> AsyncIterator[FakeAdmission]:
        self.generated.append(request)
        words = [w + " " for w in self.reply.split()]
        words[-1] = words[-1].rstrip()
        hold = self.hold

        async def outputs() -> AsyncIterator[StepOutput]:
            for i, word in enumerate(words):
                if i == 1 and hold is not None:
                    await hold.wait()
                last = i == len(words) - 1
                yield StepOutput(len(self.generated), i + 1, word, "stop" if last else None)

        yield FakeAdmission(len(self.generated), outputs())

    async def statistics(self) -> ModelStatistics:
        empty = HistogramStatistics((1.0,), (0,), 0, 0.0)
        return ModelStatistics(
            slots_total=4, slots_busy=0, queue_depth=0, queue_max=16, engine_alive=self.alive,
            engine_restarts=0, engine_error=None if self.alive else "engine down",
            steps=0, tokens_generated=0, requests_admitted=len(self.generated),
            requests_rejected=0, rendering=0,
            prompt_cache=PromptCacheStatistics(0, 0, 0, 0, 0),
            generation=GenerationStatistics(len(self.generated), 0, {}, empty, empty, empty,
                                            empty))


class FlakyEntries:
    """Memory Entries whose operations raise StoreUnavailable while `backend.down`, as a
    shared store's do while Redis cannot be reached."""

    OPERATIONS = frozenset({"put", "get", "find", "append", "set_first", "remove_value",
                            "delete", "pin", "unpin", "ping"})

    def __init__(self, inner: Entries, backend: FlakyBackend) -> None:
        self._inner = inner
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.OPERATIONS:
            return attr

        def operation(*args: Any, **kwargs: Any) -> Any:
            if self._backend.down:
                raise StoreUnavailable("the store (Redis) is unreachable: test")
            return attr(*args, **kwargs)
        return operation


class FlakyBackend(MemoryBackend):
    def __init__(self) -> None:
        self.down = False

    def entries(self, name: str, *, max_entries: int, max_bytes: int, ttl_secs: float
                ) -> Entries:
        inner = super().entries(name, max_entries=max_entries, max_bytes=max_bytes,
                                ttl_secs=ttl_secs)
        return FlakyEntries(inner, self)


def record_json(stored: StoredResponse | None) -> Any:
    """A stored response's record as its JSON, exactly as kept."""
    assert stored is not None
    return json.loads(stored.body)


@attrs.frozen
class Service:
    turns: Turns
    model: FakeModel
    registry: RegistryHandle
    responses: ResponseStoreHandle
    conversations: ConversationStoreHandle
    echo: ReasoningEchoHandle

    @property
    def stores(self) -> Stores:
        return Stores(self.responses, self.conversations, self.echo)

    def preparer(self) -> Preparer:
        """A Preparer over the same actors as `turns`."""
        return Preparer(model=self.model, stores=self.stores,
                        jobs=Jobs(registry=self.registry, responses=self.responses),
                        media=Media(vision=self.model.info.vision))

    def keeper(self) -> ResponseKeeper:
        """The default tenant's keeper over the same actors as `turns`."""
        return ResponseKeeper(self.stores)


async def start_service(nursery: trio.Nursery, *, model: FakeModel | None = None,
                        backend: Backend = MEMORY, max_bytes: int = 10_000_000,
                        ttl_secs: float = 3600, ephemeral_ttl_secs: float = 600,
                        board: JobBoardHandle | None = None) -> Service:
    """The actors the turn service holds, started in `nursery`, and the service over them."""
    model = model or FakeModel()
    registry = await nursery.start(Registry(background_max_jobs=8).run)
    responses = await nursery.start(ResponseStore(
        max_entries=100, max_bytes=max_bytes, ttl_secs=ttl_secs,
        ephemeral_ttl_secs=ephemeral_ttl_secs, backend=backend).run)
    conversations = await nursery.start(ConversationStore(
        max_entries=100, max_bytes=10_000_000, ttl_secs=ttl_secs, backend=backend).run)
    echo = await nursery.start(ReasoningEchoStore(max_bytes=1_000_000, backend=backend).run)
    turns = Turns(models=FixedModel(model, (MODEL,)), registry=registry,
                  stores=Stores(responses, conversations, echo),
                  board=board)
    return Service(turns, model, registry, responses, conversations, echo)


def request(**fields: Any) -> CreateResponse:
    """A create request as the HTTP layer structures it."""
    body: dict[str, Any] = {"model": MODEL, "input": "hi", **fields}
    created: CreateResponse = structure(body, CreateResponse)
    return created


def conversation(turns: int, words: int = 12) -> list[dict[str, Any]]:
    """`turns` user/assistant exchanges of `words` words each, then a last user message."""
    items: list[dict[str, Any]] = []
    for i in range(turns):
        items.append({"role": "user", "content": f"question {i} " + "word " * words})
        items.append({"role": "assistant", "content": f"answer {i} " + "word " * words})
    items.append({"role": "user", "content": "the last question"})
    return items


async def until(predicate: Any, interval: float = 0.01) -> None:
    """Returns once `predicate()` is true, checking every `interval` seconds."""
    while not predicate():
        await trio.sleep(interval)


def statuses(events: Sequence[Any]) -> list[str]:
    return [plain(e)["type"] for e in events]
