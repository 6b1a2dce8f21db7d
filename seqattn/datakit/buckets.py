"""Length-bucketed training batches: sequences of similar length in one batch, so padding (and the
attention spent on it) stays small.

:class:`LengthBucketSampler` is a ``torch.utils.data.BatchSampler``: it takes the order of an inner
sampler (shuffled, or Lightning's ``DistributedSampler`` under DDP, which it re-creates the batch
sampler with), cuts it into pools of ``bucket_batches`` batches, sorts each pool by length, cuts
the pool into batches and shuffles the batches. Every item is in exactly one batch per epoch.
With ``shuffle=False`` (validation: :meth:`seqattn.datakit.module.DataModule.split_loader`) the batches
keep the pools' sorted order and nothing random is drawn.

Exact mid-epoch resume (:mod:`seqattn.training.resume`): all its randomness is drawn at the start
of ``__iter__`` from one ``torch.Generator`` -- the inner ``RandomSampler``'s, shared -- whose state
at the start of the epoch the resumable loader checkpoints; restored, it gives the same batches in
the same order.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch
from torch.utils.data import BatchSampler, Sampler


class LengthBucketSampler(BatchSampler):
    """Batches of indices of similar ``lengths``.

    Args:
        sampler: the order to draw from (e.g. ``RandomSampler(dataset, generator=g)``).
        batch_size: items per batch; drop_last: drop each epoch's last, short batch.
        lengths: the length of every dataset item (tokens, frames), indexed like the dataset.
        bucket_batches: batches per sorted pool (larger: less padding, less randomness).
        generator: shuffles the batches; default the inner sampler's generator (one state to resume).
        shuffle: shuffle the batches (training); False: shortest first, no random draw (evaluation).
    """

    def __init__(self, sampler: Sampler[int], batch_size: int, drop_last: bool = False,
                 lengths: Sequence[int] | None = None, bucket_batches: int = 50,
                 generator: torch.Generator | None = None, shuffle: bool = True) -> None:
        super().__init__(sampler, batch_size, drop_last)
        if lengths is None:
            raise ValueError("LengthBucketSampler needs the lengths of the dataset's items")
        if bucket_batches < 1:
            raise ValueError(f"bucket_batches must be >= 1, got {bucket_batches}")
        self.lengths = [int(n) for n in lengths]
        self.bucket_batches = int(bucket_batches)
        self.generator = generator if generator is not None else getattr(sampler, "generator", None)
        self.shuffle = bool(shuffle)

    def batches(self) -> list[list[int]]:
        """This epoch's batches in order (draws the inner sampler's order and the batch shuffle)."""
        order = list(self.sampler)
        pool = self.batch_size * self.bucket_batches
        batches = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start:start + pool], key=self.lengths.__getitem__)  # stable
            for first in range(0, len(chunk), self.batch_size):
                batch = chunk[first:first + self.batch_size]
                if len(batch) == self.batch_size or not self.drop_last:
                    batches.append(batch)
        if not self.shuffle:
            return batches
        shuffle = torch.randperm(len(batches), generator=self.generator).tolist()
        return [batches[i] for i in shuffle]

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches()

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def padding_fraction(batches: Sequence[Sequence[int]], lengths: Sequence[int]) -> float:
    """Share of padded positions over ``batches`` (each padded to its longest item)."""
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches if b)
    return 1.0 - real / max(padded, 1)
