"""Which shards a reader reads, in which order: pure functions, no I/O.

A data set is a sorted list of shard paths. Every epoch the list is permuted with a seed that all
readers agree on (``seed``, ``epoch``), then dealt out: first across distributed ranks
(``order[rank::world_size]``), then across the DataLoader workers of a rank
(``rank_shards[worker::num_workers]``). So every shard is read by exactly one worker of exactly one
rank per epoch, and ranks need not agree on their number of workers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: Characters that make a store path a glob pattern rather than a folder or file.
GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class Consumer:
    """One reader of a data set: a DataLoader worker of a distributed rank.

    Attributes
    ----------
    rank, world_size
        The torch.distributed rank and number of ranks (0 and 1 outside distributed training).
    worker, num_workers
        The DataLoader worker id and the number of workers of this rank (0 and 1 without workers).
    """

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"rank {self.rank} is not in 0..world_size-1 (world_size {self.world_size}); "
                "check RANK and WORLD_SIZE or the torch.distributed process group."
            )
        if self.num_workers < 1 or not 0 <= self.worker < self.num_workers:
            raise ValueError(f"worker {self.worker} is not in 0..{self.num_workers - 1}")


def distributed_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(rank, world_size)`` from the ``RANK`` and ``WORLD_SIZE`` variables (torchrun's).

    Returns ``(0, 1)`` when ``WORLD_SIZE`` is unset.

    Raises
    ------
    ValueError
        A variable is not an integer, or ``RANK`` is outside ``0..WORLD_SIZE-1``.
    """
    env = os.environ if environ is None else environ
    raw_world, raw_rank = env.get("WORLD_SIZE", "").strip(), env.get("RANK", "").strip()
    if not raw_world:
        return 0, 1
    try:
        world_size, rank = int(raw_world), int(raw_rank or "0")
    except ValueError:
        raise ValueError(
            f"RANK={raw_rank!r} and WORLD_SIZE={raw_world!r} must be integers (as torchrun sets)"
        ) from None
    Consumer(rank=rank, world_size=world_size)  # validates
    return rank, world_size


def epoch_rng(seed: int, epoch: int, *extra: int) -> np.random.Generator:
    """A NumPy generator for ``(seed, epoch, *extra)``; equal arguments give equal streams."""
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF, *extra])


def shard_order(shards: Sequence[str], *, seed: int, epoch: int, shuffle: bool) -> list[str]:
    """The epoch's order of ``shards``: sorted, then permuted by ``(seed, epoch)`` if shuffling."""
    ordered = sorted(shards)
    if not shuffle:
        return ordered
    perm = epoch_rng(seed, epoch).permutation(len(ordered))
    return [ordered[i] for i in perm]


def assign_shards(order: Sequence[str], consumer: Consumer) -> list[str]:
    """The shards of ``order`` that ``consumer`` reads: its rank's share, then its worker's.

    Raises
    ------
    ValueError
        Fewer shards than ranks: some rank would get no data and distributed training would hang.
    """
    if len(order) < consumer.world_size:
        raise ValueError(
            f"{len(order)} shard(s) for {consumer.world_size} ranks: every rank needs at least one "
            "shard. Write the data set as more, smaller shards."
        )
    rank_shards = list(order)[consumer.rank :: consumer.world_size]
    return rank_shards[consumer.worker :: consumer.num_workers]


def is_glob(path: str) -> bool:
    """Whether ``path`` is a glob pattern (contains ``*``, ``?`` or ``[``)."""
    return any(c in GLOB_CHARS for c in path)
