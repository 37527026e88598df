"""One model sharded over several processes (`--distributed pipeline|tensor`), kept in
lockstep by construction (docs/deployment.md).

Every rank runs the same engine loop (model/engine.py) on its shard of the weights: mlx-lm's
`model.shard(group)` (tensor parallelism) or `model.model.pipeline(group)` (pipeline
parallelism), whose forward passes exchange activations with MLX's collectives. A
collective blocks until every rank calls it, so any difference in the order or count of
forward passes between ranks hangs them all. So only rank 0 decides: before each engine
step it broadcasts one `StepRecord` (the commands its model actor handed it, with each
request's tokens, sampling settings and seed; the prompt-cache reuse it found, in tokens;
the prefill chunk its pacer chose; whether a forward pass follows), and the other ranks
apply exactly that and decide nothing. The tokens rank 0 sampled ride on the next record,
and a follower that sampled otherwise stops (`Diverged`) instead of going on apart.

Speculative decoding's per-step choice (plain, or each row's draft), which it makes from
timings each rank would measure alone, is rank 0's too: it goes on the control link inside
the step (`decide`, speculative.Decider). What cannot be made identical on every rank yet is
refused before anything loads (settings.py's `distributed_problems`, system.py's
`checked_catalog`): vision models, the quantized KV cache and the prompt cache's disk tier.

A record goes from rank 0 to each follower over a TCP connection of their own (the control
link), not through MLX's collectives: MLX's ring backend busy-polls while it waits, so a
follower waiting in a collective for the next request would burn a core for as long as the
server idles, and its socket errors can leave a queued collective waiting forever (mlx
#3862). On the control link a follower blocks in `recv` (no CPU), a follower's death is a
send error at rank 0 at once, and rank 0's death is an end of stream at each follower. The
link is made at start: rank 0 listens on its address on the group's network (the launcher's
hostfile names it, or `--distributed-control`), the port and a random secret go to every rank
through one collective, and each follower connects and presents the secret; rank 0 accepts
exactly the group's other ranks and closes its listener. A record is a pickle (the ranks are
one deployment's processes, started by the same command, and only they know the secret).
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import select
import socket
import struct
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import attrs

from ..errors import SettingsError

GATHER_EVERY = 32     # steps between two gatherings of every rank's figures
CONNECT_SECONDS = 60.0   # for the followers to connect the control link at start
LENGTH = struct.Struct("<Q")   # a record's length, before it on the control link
SECRET_BYTES = 16


class Diverged(RuntimeError):
    """A follower's state differs from rank 0's (a sampled token, a prompt-cache reuse):
    it stops rather than run on apart."""


@attrs.frozen
class StepRecord:
    """Rank 0's decisions for one engine step, applied as they are by every other rank."""

    commands: tuple[Any, ...] = ()            # engine.Insert / engine.Remove, in order
    reuse: tuple[tuple[int, int], ...] = ()   # (uid, prompt tokens the prompt cache gives)
    chunk: int = 0                            # the prefill chunk (prefill_step_size)
    run: bool = False                         # a forward pass (generator.next()) follows
    check: tuple[tuple[int, int], ...] = ()   # (uid, token) rank 0 sampled since its last record
    gather: bool = False                      # every rank's figures are gathered after it
    stop: bool = False                        # the engine ends: followers exit


@attrs.frozen
class RankFigures:
    """One rank's engine figures since it started."""

    rank: int
    steps: int = 0                 # forward passes (engine steps that ran the model)
    step_seconds: float = 0.0      # their time: compute and the model's own collectives
    record_seconds: float = 0.0    # time sending (rank 0) or receiving the step records on
                                   # the control link (a follower's includes waiting for
                                   # rank 0 to decide)


def rank_of_environment() -> int | None:
    """The rank mlx.launch (or the operator) gave this process, from the environment
    (`MLX_RANK`); None when it is not set."""
    value = os.environ.get("MLX_RANK")
    return int(value) if value is not None and value.strip().isdigit() else None


def control_address(explicit: str | None = None) -> str:
    """Rank 0's address on the group's network, where the control link listens: `explicit`
    (--distributed-control), else rank 0's entry in the ring backend's hostfile, else the
    jaccl backend's coordinator. A SettingsError when none says."""
    if explicit:
        return explicit
    hostfile = os.environ.get("MLX_HOSTFILE")
    if hostfile:
        try:
            hosts = json.loads(Path(hostfile).read_text())
        except (OSError, ValueError):
            hosts = None
        if isinstance(hosts, list) and hosts and isinstance(hosts[0], list) and hosts[0] \
                and isinstance(hosts[0][0], str):
            return hosts[0][0].rsplit(":", 1)[0]
    coordinator = os.environ.get("MLX_JACCL_COORDINATOR")
    if coordinator:
        return coordinator.rsplit(":", 1)[0]
    raise SettingsError("--distributed-control: the launcher's environment does not say "
                        "rank 0's address (no ring hostfile, no jaccl coordinator); give the "
                        "address the other ranks reach rank 0 at")


def join() -> Any:
    """The process group (MLX's distributed backend: `ring` over TCP, `jaccl` over RDMA,
    whichever the launcher's environment configures). Waits until every rank has joined.
    A SettingsError when this process was not started as one rank of several."""
    import mlx.core as mx

    if not mx.distributed.is_available():
        raise SettingsError("--distributed: this MLX build has no distributed backend")
    if rank_of_environment() is None:
        raise SettingsError("--distributed: start every rank with mlx.launch (or set MLX_RANK "
                            "and MLX_HOSTFILE); this process is not one rank of a group")
    try:
        group = mx.distributed.init(strict=True)
    except Exception as exc:
        raise SettingsError(f"--distributed: the group could not be formed ({exc})") from None
    if group.size() < 2:
        raise SettingsError("--distributed: the group has one rank; it needs two or more")
    return group


def shard(model: Any, mode: str, group: Any) -> None:
    """Keeps this rank's part of `model` (its weights unevaluated: only that part is ever
    read): mlx-lm's tensor sharding or pipeline split. A SettingsError saying why when the
    model cannot be sharded that way over this group."""
    size = group.size()
    kind = type(model).__module__.rsplit(".", 1)[-1]
    if mode == "tensor":
        if not hasattr(model, "shard"):
            raise SettingsError(f"--distributed tensor: mlx-lm's {kind} model cannot be "
                                "sharded by tensor (it has no shard()); try pipeline")
        for name, count in _head_counts(model):
            if count % size:
                raise SettingsError(f"--distributed tensor: the model's {count} {name} do not "
                                    f"split evenly over {size} ranks")
        model.shard(group)
    else:
        inner: Any = getattr(model, "model", None)
        if not hasattr(inner, "pipeline"):
            raise SettingsError(f"--distributed pipeline: mlx-lm's {kind} model cannot be "
                                "split into a pipeline (it has no pipeline()); try tensor")
        layers = len(inner.layers)
        if layers < size:
            raise SettingsError(f"--distributed pipeline: the model's {layers} layers cannot "
                                f"be split over {size} ranks")
        inner.pipeline(group)


def _head_counts(model: Any) -> list[tuple[str, int]]:
    """The attention head counts tensor sharding divides, as the model's args name them."""
    args = getattr(model, "args", None)
    counts = []
    for name, attr in (("attention heads", "num_attention_heads"),
                       ("key-value heads", "num_key_value_heads")):
        value = getattr(args, attr, None)
        if isinstance(value, int) and value > 0:
            counts.append((name, value))
    return counts


def kv_bytes_per_token(model: Any, caches: Sequence[Any]) -> int:
    """This rank's KV cache bytes per token: one token through the model (every rank does it
    together), then each attention cache's bytes over the positions it allocated."""
    import mlx.core as mx

    mx.eval(model(mx.array([[0]]), cache=list(caches)))   # the whole pass: its collectives
    total = 0.0
    for c in caches:
        keys = getattr(c, "keys", None)
        if keys is not None and getattr(keys, "ndim", 0) == 4 and keys.shape[2]:
            total += c.nbytes / keys.shape[2]
    return int(total)


class Lockstep:
    """This rank's side of the step records (the engine thread's alone)."""

    def __init__(self, group: Any, stream: Any, control: str | None = None):
        """`stream`: where the collectives run, in order with the engine's forward passes.
        `control`: rank 0's address for the control link (`control_address`)."""
        self.group = group
        self.stream = stream
        self.control = control
        self._links: list[socket.socket] = []   # rank 0: one per follower, by rank; else
                                                # the one to rank 0
        self.rank: int = group.rank()
        self.size: int = group.size()
        self.broken = False   # a collective or the control link failed: nothing more is sent
        self.ranks: tuple[RankFigures, ...] = ()   # on rank 0: the last gathering
        self._steps = 0
        self._step_seconds = 0.0
        self._record_seconds = 0.0
        self._unchecked: list[tuple[int, int]] = []   # (uid, token) since the last record
        self._since_gather = 0

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def start(self, per_token: int, prompt_cache_bytes: int) -> int:
        """Makes the control link; seeds every rank's random state alike (an unseeded
        request samples from it, in the same order on every rank); returns the prompt
        cache's budget in tokens: the bytes asked for over the whole model's KV bytes per
        token (every rank's summed)."""
        import mlx.core as mx

        listener = None
        if self.leads:
            listener = socket.create_server((control_address(self.control), 0))
            port = listener.getsockname()[1]
            words = [secrets.randbits(31), port,
                     *struct.unpack("<4i", secrets.token_bytes(SECRET_BYTES))]
        else:
            words = [0] * (2 + SECRET_BYTES // 4)
        shared = [int(v) for v in self._all_sum(mx.array(
            [*words, per_token], dtype=mx.int64)).tolist()]
        seed, port, whole = shared[0], shared[1], shared[-1]
        secret = struct.pack("<4i", *shared[2:-1])
        if listener is not None:
            with listener:
                self._accept(listener, secret)
        else:
            self._connect(control_address(self.control), port, secret)
        mx.random.seed(seed)
        self.gather()   # rank 0 knows its group from the start
        if not prompt_cache_bytes:
            return 0
        return max(1, prompt_cache_bytes // max(1, whole))

    def close(self) -> None:
        for link in self._links:
            link.close()
        self._links = []

    # ---- rank 0 ---------------------------------------------------------------------------

    def _accept(self, listener: socket.socket, secret: bytes) -> None:
        """Every other rank's control link, each presenting the secret and its rank."""
        links: dict[int, socket.socket] = {}
        deadline = time.monotonic() + CONNECT_SECONDS
        while len(links) < self.size - 1:
            listener.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                raise RuntimeError(f"--distributed: {self.size - 1 - len(links)} ranks did "
                                   f"not connect the control link in {CONNECT_SECONDS:g} s"
                                   ) from None
            conn.settimeout(10)
            try:
                hello = _receive(conn, SECRET_BYTES + 4)
            except OSError:
                conn.close()
                continue
            rank = int.from_bytes(hello[SECRET_BYTES:], "little")
            if not secrets.compare_digest(hello[:SECRET_BYTES], secret) \
                    or not 0 < rank < self.size or rank in links:
                conn.close()   # not one of the group's ranks
                continue
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            links[rank] = conn
        self._links = [links[r] for r in sorted(links)]

    def lead(self, record: StepRecord) -> StepRecord:
        """Broadcasts rank 0's record (with the tokens sampled since the last one)."""
        record = attrs.evolve(record, check=tuple(self._unchecked),
                              gather=self._gather_due(record))
        self._unchecked = []
        try:   # once a step: a speculative step's choice follows on the same links
            self._check_followers()
        except OSError as exc:
            self.broken = True
            raise ConnectionError(f"--distributed: {exc}") from exc
        self._share(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
        return record

    # ---- the other ranks ------------------------------------------------------------------

    def _connect(self, host: str, port: int, secret: bytes) -> None:
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            try:
                link = socket.create_connection((host, port), timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        link.settimeout(None)
        link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link.sendall(secret + self.rank.to_bytes(4, "little"))
        self._links = [link]

    def _check_followers(self) -> None:
        """A follower never writes after its hello: a link that reads is one whose rank is
        gone (its end of stream), found before a step is sent to it."""
        readable, _, _ = select.select(self._links, [], [], 0)
        for link in readable:
            if not link.recv(1):
                rank = self._links.index(link) + 1
                raise ConnectionError(f"rank {rank} closed its control link (it exited)")

    def follow(self) -> StepRecord:
        """The next record, once rank 0 sends it; Diverged when this rank sampled other
        tokens than rank 0 did since the last one."""
        record: StepRecord = pickle.loads(self._share(None))
        if record.check != tuple(self._unchecked):
            raise Diverged(f"rank {self.rank} sampled {list(self._unchecked)} where rank 0 "
                           f"sampled {list(record.check)} ((sequence, token) pairs)")
        self._unchecked = []
        return record

    def decide(self, drafts: list[list[int]] | None) -> list[list[int]] | None:
        """A speculative decode step's choice (speculative.Decider): rank 0 sends its own (None:
        a plain step; else each row's draft), the others take it; on the control link, after
        the step's record."""
        if self.leads:
            self._share(pickle.dumps(drafts, protocol=pickle.HIGHEST_PROTOCOL))
            return drafts
        chosen: list[list[int]] | None = pickle.loads(self._share(None))
        return chosen

    # ---- every rank -----------------------------------------------------------------------

    def sampled(self, uid: int, token: int) -> None:
        self._unchecked.append((uid, token))

    def stepped(self, seconds: float) -> None:
        self._steps += 1
        self._step_seconds += seconds

    def gather(self) -> None:
        """Every rank's figures, on every rank (rank 0 reports them)."""
        import mlx.core as mx

        mine = mx.array([[self._steps, self._step_seconds, self._record_seconds]],
                        dtype=mx.float32)
        every = self._collective(lambda: mx.distributed.all_gather(mine, group=self.group,
                                                                  stream=self.stream))
        self.ranks = tuple(RankFigures(r, int(s), float(a), float(b))
                           for r, (s, a, b) in enumerate(every.tolist()))

    def _gather_due(self, record: StepRecord) -> bool:
        self._since_gather += record.run
        if record.stop or self._since_gather < GATHER_EVERY:
            return False
        self._since_gather = 0
        return True

    def _share(self, data: bytes | None) -> bytes:
        """rank 0's `data` on every rank, over the control link (rank 0 sends, the others
        receive; None on a follower). A link that fails breaks the group."""
        began = time.perf_counter()
        try:
            if data is not None:
                frame = LENGTH.pack(len(data)) + data
                for link in self._links:
                    link.sendall(frame)
                body = data
            else:
                (length,) = LENGTH.unpack(_receive(self._links[0], LENGTH.size))
                body = _receive(self._links[0], length)
        except OSError as exc:
            self.broken = True
            raise ConnectionError(f"--distributed: the control link to "
                                  f"{'a follower' if data is not None else 'rank 0'} "
                                  f"broke ({exc})") from exc
        self._record_seconds += time.perf_counter() - began
        return body

    def _all_sum(self, array: Any) -> Any:
        import mlx.core as mx

        return self._collective(lambda: mx.distributed.all_sum(array, group=self.group,
                                                               stream=self.stream))

    def _collective(self, op: Callable[[], Any]) -> Any:
        import mlx.core as mx

        try:
            out = op()
            mx.eval(out)
        except BaseException:
            self.broken = True
            raise
        return out


def _receive(link: socket.socket, size: int) -> bytes:
    """Exactly `size` bytes; an end of stream is a ConnectionError (an OSError)."""
    chunks = []
    while size:
        chunk = link.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("the other end closed the link")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
