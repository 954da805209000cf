"""Tensor parallelism over torch.distributed: one model split across ``tensor_parallel_size`` ranks.

The split is Megatron's. Attention heads and KV heads are divided between the ranks (column-parallel
fused QKV, row-parallel O), and so is the MLP's width (column-parallel gate/up, row-parallel down;
each expert's width in a mixture of experts). A row-parallel output is summed over the ranks by one
all-reduce. The embedding and the lm_head are split by vocabulary rows: an embedding row lives on
one rank (the others add zeros in the same all-reduce), and the logits' column blocks are gathered
on rank 0. Norms, rotary tables and routers are replicated. Each rank holds its KV heads' share of
the paged KV cache, in the same number of blocks.

Rank 0, the driver, is the engine: the scheduler, the block manager, grammar masks and sampling
live there once. Each step it broadcasts one message (the step's token ids, positions, KV slots,
block tables and rows to sample: plain lists, pickled), which the workers replay on their shards.
A message longer than ``CHUNK`` bytes takes a second broadcast; control goes over gloo whatever the
backend (NCCL on CUDA, gloo on CPU).

Workers are started in one of two ways:

* the engine starts ``tensor_parallel_size - 1`` Python processes on this machine (a fresh
  interpreter each, which never imports the caller's ``__main__``), which join a ``TCPStore`` on
  127.0.0.1;
* ``torchrun`` starts every rank (on one machine or several), and the environment it sets (``RANK``,
  ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) is the rendezvous. The same command runs
  everywhere: rank 0 is the engine, any other rank serves as a worker until rank 0 shuts down.

A worker that dies makes the driver's next collective fail (gloo sees the closed connection at
once); the engine then refuses every further step with ``EngineDeadError`` naming the rank. A
stuck peer is bounded by ``distributed_timeout_s``. ``close`` tells the workers to stop, waits for
them (bounded), and kills any left.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import pickle
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from guided.errors import ConfigError, EngineDeadError, GuidedError

logger = logging.getLogger(__name__)

CHUNK = 1 << 16  # bytes of the one broadcast a step message takes when it fits
GATHER_SUM_MAX = 1 << 20  # elements (all ranks') up to which a CPU all-reduce is a gather and a sum
STARTUP_S = 300.0  # bound on a spawned worker's start (import, then joining the group)
CLOSE_S = 10.0  # bound on the workers' exit after "stop"


@dataclass(frozen=True, slots=True)
class TensorParallel:
    """This process's place in the group: ``rank`` of ``size`` (``SINGLE``: no parallelism). The
    model's layers split their weights and sum their partial outputs through it."""

    rank: int = 0
    size: int = 1
    # seconds spent in collectives and how many, by kind (the benchmark's communication time)
    stats: dict = field(default_factory=dict, compare=False, hash=False)

    def split(self, n: int, what: str) -> int:
        """This rank's share of ``n`` (heads, widths): a ConfigError unless ``size`` divides it."""
        if n % self.size:
            raise ConfigError(f"{what} ({n}) is not divisible by tensor_parallel_size ({self.size})")
        return n // self.size

    def vocab_rows(self, vocab: int) -> tuple[int, int]:
        """(first row, rows per rank) of the vocabulary split; the last rank's block is padded."""
        per = -(-vocab // self.size)
        return self.rank * per, per

    def shard(self, tensor: torch.Tensor, dim: int) -> torch.Tensor:
        """This rank's block of a checkpoint tensor along ``dim`` (a weight's whole size there)."""
        if self.size == 1:
            return tensor
        n = self.split(tensor.shape[dim], "a weight's size")
        return tensor.narrow(dim, self.rank * n, n)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of ``x`` over the ranks, in place. On CPU a small ``x`` is gathered from every rank
        and summed in rank order: gloo's all-reduce of a decode step's activations took 1.2-1.9 ms on
        a 2-core machine where gathering them took 0.35 ms (the sum is the same on every rank)."""
        if self.size > 1:
            t = time.perf_counter()
            if x.device.type == "cpu" and x.numel() * self.size <= GATHER_SUM_MAX:
                parts = torch.empty(self.size * x.numel(), dtype=x.dtype)
                _gather_single(parts, x.reshape(-1))
                torch.sum(parts.view(self.size, *x.shape), dim=0, out=x)
            else:
                dist.all_reduce(x)
            self._count("all_reduce", t)
        return x

    def gather_columns(self, x: torch.Tensor) -> torch.Tensor | None:
        """Rank 0: the ranks' ``[rows, n]`` blocks side by side ``[rows, size * n]``; others: None."""
        if self.size == 1:
            return x
        t = time.perf_counter()
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.size)] if self.rank == 0 else None
        dist.gather(x, parts, dst=0)
        self._count("gather", t)
        return torch.cat(parts, dim=-1) if parts is not None else None

    def _count(self, kind: str, since: float) -> None:
        s = self.stats
        s[kind + "_s"] = s.get(kind + "_s", 0.0) + time.perf_counter() - since
        s[kind + "s"] = s.get(kind + "s", 0) + 1


SINGLE = TensorParallel()
_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


# ---------------------------------------------------------------------- the group's processes
def torchrun_rank(size: int) -> int | None:
    """This process's rank when ``torchrun`` (or its environment, set by hand) started a group of
    ``size`` ranks; None when the environment names no group. A group of another size is an error."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    world = int(os.environ["WORLD_SIZE"])
    if world == 1 and size == 1:
        return None
    if world != size:
        raise ConfigError(f"the launcher started {world} ranks (WORLD_SIZE) but tensor_parallel_size is {size}")
    return int(os.environ["RANK"])


class Group:
    """One side of a tensor-parallel group: the driver's (rank 0: it sends each step and owns the
    spawned workers) or a worker's (it receives)."""

    def __init__(self, tp: TensorParallel, control, processes: list, timeout_s: float):
        self.tp = tp
        self.control = control  # the gloo group of the step messages (None: the default group is gloo)
        self.processes = processes  # spawned workers (driver, spawn mode only)
        self.timeout_s = timeout_s
        self.dead: str | None = None  # why the group cannot run another step
        self.closed = False

    # -------------------------------------------------------------- messages
    def send(self, message) -> None:
        """Driver: broadcast one message to every worker."""
        self._broadcast(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def recv(self):
        """Worker: the driver's next message."""
        return pickle.loads(self._broadcast(None))

    def _broadcast(self, data: bytes | None) -> bytes:
        t = time.perf_counter()
        buf = torch.zeros(CHUNK, dtype=torch.uint8)
        if data is not None:
            first = len(data).to_bytes(8, "little") + data[: CHUNK - 8]
            buf[: len(first)] = torch.frombuffer(bytearray(first), dtype=torch.uint8)
        dist.broadcast(buf, src=0, group=self.control)
        n = int.from_bytes(buf[:8].numpy().tobytes(), "little")
        head = buf[8 : 8 + min(n, CHUNK - 8)].numpy().tobytes()
        if n > CHUNK - 8:  # the rest in a second broadcast
            rest = torch.empty(n - (CHUNK - 8), dtype=torch.uint8)
            if data is not None:
                rest.copy_(torch.frombuffer(bytearray(data[CHUNK - 8 :]), dtype=torch.uint8))
            dist.broadcast(rest, src=0, group=self.control)
            head += rest.numpy().tobytes()
        self.tp._count("broadcast", t)
        return head

    def all_ok(self, error: str | None) -> None:
        """Every rank says whether its set-up went well; any failure raises on every rank, naming it."""
        answers: list = [None] * self.tp.size
        dist.all_gather_object(answers, error, group=self.control)
        failed = [(r, e) for r, e in enumerate(answers) if e is not None]
        if failed:
            rank, why = failed[0]
            raise GuidedError(f"tensor-parallel rank {rank} failed to start: {why}")

    # -------------------------------------------------------------- failure and shutdown
    def failure(self, error: BaseException) -> EngineDeadError:
        """The error a failed collective becomes: the group is dead from now on (rank 0 names the
        worker that is gone when it knows)."""
        gone = _exited(self.processes)
        for _ in range(20):  # a peer's death is seen on the socket a moment before its exit code
            if gone or not self.processes:
                break
            time.sleep(0.05)
            gone = _exited(self.processes)
        who = ", ".join(gone) if gone else "a tensor-parallel peer"
        self.dead = f"{who} is gone, so the engine cannot run another step ({type(error).__name__}: {error})"
        return EngineDeadError(self.dead)

    def check(self) -> None:
        if self.dead is not None:
            raise EngineDeadError(self.dead)

    def close(self) -> None:
        """Driver: stop the workers (bounded), kill what is left, leave the process group."""
        if self.closed:
            return
        self.closed = True
        if self.tp.rank == 0 and self.dead is None:
            try:
                self.send(("stop",))
            except Exception as e:  # a worker already gone: the others are killed below
                logger.warning("tensor-parallel shutdown: %s", e)
        if self.dead is None:
            self.dead = "the engine was shut down"
        deadline = time.monotonic() + CLOSE_S
        for p in self.processes:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("tensor-parallel worker pid %d did not stop in %.0f s; killing it", p.pid, CLOSE_S)
                p.kill()
                p.wait()
        leave()


def _exited(processes: list) -> list[str]:
    return [f"rank {i} (exit code {p.returncode})" for i, p in enumerate(processes, 1) if p.poll() is not None]


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def control_group(name: str):
    """The group of the step messages: gloo whatever the tensors' backend."""
    return None if name == "gloo" else dist.new_group(backend="gloo")


def leave() -> None:
    """Leave the process group (a broken one too)."""
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as e:  # a broken group: nothing more to free here
            logger.debug("destroy_process_group: %s", e)


# a started worker's command (``engine.tp_worker``: the worker side, which needs the model runner)
WORKER = "import sys; from guided.engine.tp_worker import spawned; spawned(sys.argv[1])"
KEY = "guided/tp"


def start(fields: dict, size: int, device: torch.device, timeout_s: float) -> Group:
    """Driver: join or build the group of ``size`` ranks (torchrun's environment, else spawned
    workers given ``fields``, the ``Config`` keyword arguments), as rank 0."""
    if dist.is_initialized():
        raise ConfigError(
            "torch.distributed is already initialized in this process: one tensor-parallel engine per "
            "process (shut the other down first)"
        )
    name, timeout = backend_for(device), datetime.timedelta(seconds=timeout_s)
    rank = torchrun_rank(size)
    if rank is not None:
        if rank != 0:
            raise ConfigError(f"rank {rank} serves as a worker (run_worker), not as the engine")
        dist.init_process_group(name, init_method="env://", rank=0, world_size=size, timeout=timeout)
        return Group(TensorParallel(0, size), control_group(name), [], timeout_s)
    port = _free_port()
    store = dist.TCPStore("127.0.0.1", port, size, is_master=True, timeout=timeout, wait_for_workers=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # imports as resolved here
    procs = []
    try:
        for r in range(1, size):
            spec = json.dumps({"fields": fields, "rank": r, "size": size, "port": port, "timeout_s": timeout_s})
            procs.append(subprocess.Popen([sys.executable, "-c", WORKER, spec], env=env, stdin=subprocess.DEVNULL))
        _wait_joined(store, procs)
        dist.init_process_group(name, store=dist.PrefixStore(KEY, store), rank=0, world_size=size, timeout=timeout)
    except BaseException:
        for p in procs:
            p.kill()
            p.wait()
        leave()
        raise
    group = Group(TensorParallel(0, size), control_group(name), procs, timeout_s)
    group.store = store  # the rendezvous lives as long as the group
    return group


def _wait_joined(store, procs) -> None:
    """Until every spawned worker has started (its key in the store); a worker that exits first, or
    one that takes longer than ``STARTUP_S``, is an error naming it."""
    keys = [f"{KEY}/up/{r}" for r in range(1, len(procs) + 1)]
    deadline = time.monotonic() + STARTUP_S
    while not store.check(keys):
        gone = _exited(procs)
        if gone:
            raise GuidedError(f"tensor-parallel worker {gone[0]} exited while starting; its error is printed above")
        if time.monotonic() > deadline:
            raise GuidedError(f"tensor-parallel workers did not start within {STARTUP_S:.0f} s")
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
