"""What the split-based DataModules share: one loader per split over ``self.datasets``."""

from __future__ import annotations

from typing import Any, Callable

import lightning as L
import torch
from torch.utils.data import DataLoader


class SplitDataModule(L.LightningDataModule):
    """Train / val / test loaders over ``self.datasets[split]`` (set by ``setup()``).

    A subclass sets ``collate`` (items -> batch dict) and the attributes ``datasets``,
    ``batch_size``, ``num_workers`` and ``seed``. Training batches are shuffled with a generator
    seeded by ``seed`` (the same order for the same seed); the others keep their order.
    """

    collate: Callable[[list[Any]], dict[str, Any]]
    datasets: dict[str, Any]
    batch_size: int
    num_workers: int
    seed: int

    def split_loader(self, split: str, shuffle: bool) -> DataLoader:
        if not self.datasets:
            self.setup()
        generator = torch.Generator().manual_seed(self.seed) if shuffle else None
        return DataLoader(self.datasets[split], batch_size=self.batch_size, shuffle=shuffle, generator=generator,
                          num_workers=self.num_workers, collate_fn=self.collate,
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self.split_loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.split_loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self.split_loader("test", shuffle=False)
