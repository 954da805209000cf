"""A tensor-parallel worker (a rank other than 0): its shard of the model and of the KV cache,
replaying each step rank 0 sends until rank 0 stops it or goes away (``engine.parallel``).

``spawned`` is the entry point of a worker the engine started on this machine; ``run_worker`` that
of a rank ``torchrun`` started (the CLI and ``LLM`` call it on those ranks).
"""

from __future__ import annotations

import datetime
import json
import logging
import os

import torch
import torch.distributed as dist

from guided.errors import ConfigError, GuidedError

from .config import Config
from .model_runner import ModelRunner, resolve_device
from .parallel import KEY, Group, TensorParallel, backend_for, control_group, leave, torchrun_rank

logger = logging.getLogger(__name__)


def spawned(spec: str) -> None:
    """A started worker's entry point (``spec``: JSON of the Config's fields, its rank, the group's
    size, the store's port and the timeout)."""
    spec = json.loads(spec)
    fields, rank, size, port, timeout_s = (spec[k] for k in ("fields", "rank", "size", "port", "timeout_s"))
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))  # the ranks share this machine's cores
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore("127.0.0.1", port, size, is_master=False, timeout=timeout)
    store.set(f"{KEY}/up/{rank}", "1")
    config = Config(**fields)
    name = backend_for(resolve_device(config.device, rank))
    dist.init_process_group(name, store=dist.PrefixStore(KEY, store), rank=rank, world_size=size, timeout=timeout)
    _serve(config, Group(TensorParallel(rank, size), control_group(name), [], timeout_s))


def run_worker(config: Config) -> None:
    """A rank other than 0 under ``torchrun``: build this rank's shard and replay the driver's steps
    until it stops (or goes away). Returns when the group ends."""
    size = config.tensor_parallel_size
    rank = torchrun_rank(size)
    if not rank:
        raise ConfigError("run_worker is for ranks other than 0 of a torchrun group (RANK, WORLD_SIZE)")
    name = backend_for(resolve_device(config.device, int(os.environ.get("LOCAL_RANK", rank))))
    timeout = datetime.timedelta(seconds=config.distributed_timeout_s)
    dist.init_process_group(name, init_method="env://", rank=rank, world_size=size, timeout=timeout)
    _serve(config, Group(TensorParallel(rank, size), control_group(name), [], config.distributed_timeout_s))


def _serve(config: Config, group: Group) -> None:
    try:
        runner = ModelRunner(config, [], 0, group=group)
        while True:
            message = group.recv()
            if message[0] == "stop":
                break
            runner.replay(message[1])
    except GuidedError as e:  # another rank failed to start: it reports why
        logger.warning("tensor-parallel rank %d stops: %s", group.tp.rank, e)
    except Exception as e:
        if "Connection closed by peer" not in str(e):
            raise
        logger.warning("tensor-parallel rank %d: rank 0 went away; stopping", group.tp.rank)
    finally:
        leave()
