"""The objective's move of a batch to its device: Lightning's for the tensors, a dict batch's text as it is."""

from __future__ import annotations

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from seqattn.objectives.base import _is_text
from tests.objectives.test_optimizer import ADAMW, _model


def _batch() -> dict:
    return {
        "words": [["the", "cat"], ["sat"], []],  # sentences of words
        "ids": ("s1", "s2", "s3"),  # example ids
        "labels": torch.tensor([[1, 2], [0, -100], [-100, -100]]),
        "subsets": {"long": torch.tensor([True, False, False])},
        "lengths": [2, 1, 0],  # not text: Lightning's walk
        "mixed": [["a", torch.zeros(1)]],
    }


def test_text_passes_through_and_every_tensor_moves_as_lightning_moves_it():
    batch = _batch()
    model = _model(ADAMW)
    out = model.transfer_batch_to_device(batch, torch.device("meta"), 0)
    theirs = move_data_to_device(_batch(), torch.device("meta"))
    assert list(out) == list(batch)  # the keys in their order
    assert out["words"] is batch["words"] and out["ids"] is batch["ids"]  # not copied, not walked
    assert out["words"] == theirs["words"] and out["ids"] == theirs["ids"]
    assert out["labels"].device.type == "meta" and out["labels"].shape == batch["labels"].shape
    assert out["subsets"]["long"].device.type == "meta"
    assert out["lengths"] == [2, 1, 0] and out["mixed"][0][1].device.type == "meta"  # a tensor inside a list moves
    plain = model.transfer_batch_to_device([torch.zeros(2), ["a"]], torch.device("meta"), 0)  # not a dict
    assert plain[0].device.type == "meta" and plain[1] == ["a"]


def test_what_counts_as_text():
    assert _is_text(["a", "b"]) and _is_text((["a"], [], ("b", "c")))
    assert not _is_text([]) and not _is_text("abc") and not _is_text([1, 2]) and not _is_text([["a", 1]])
    assert not _is_text([["a"], "b"]) and not _is_text([torch.zeros(1)]) and not _is_text([[torch.zeros(1)]])
