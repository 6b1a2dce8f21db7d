"""LengthBucketSampler: every item once per epoch, less padding, and exact mid-epoch resume."""

from __future__ import annotations

import io
import itertools

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from seqattn.datakit.buckets import LengthBucketSampler, padding_fraction
from seqattn.training.resume import make_resumable

LENGTHS = [int(x) for x in torch.randint(1, 200, (203,), generator=torch.Generator().manual_seed(0))]


def _loader(seed=0, bucket_batches=4, generator_on_batches=True):
    g = torch.Generator().manual_seed(seed)
    sampler = LengthBucketSampler(RandomSampler(range(len(LENGTHS)), generator=g), 8, False, lengths=LENGTHS,
                                  bucket_batches=bucket_batches, generator=g if generator_on_batches else None)
    return DataLoader(list(range(len(LENGTHS))), batch_sampler=sampler, generator=g)


def _epoch(loader, n=None):
    return [b.tolist() for b in itertools.islice(iter(loader), n)]


def test_every_item_once_and_less_padding_than_random_batches():
    loader = _loader()
    batches = _epoch(loader)
    assert len(batches) == len(loader) == -(-len(LENGTHS) // 8)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    random_batches = [list(range(i, min(i + 8, len(LENGTHS)))) for i in range(0, len(LENGTHS), 8)]
    assert padding_fraction(batches, LENGTHS) < 0.5 * padding_fraction(random_batches, LENGTHS)
    assert _epoch(loader) != batches  # reshuffled every epoch


def test_drop_last_and_bad_arguments():
    g = torch.Generator().manual_seed(0)
    sampler = LengthBucketSampler(RandomSampler(range(203), generator=g), 8, True, lengths=LENGTHS)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 203 // 8 and all(len(b) == 8 for b in batches)
    with pytest.raises(ValueError, match="needs the lengths"):
        LengthBucketSampler(RandomSampler(range(3)), 2)
    with pytest.raises(ValueError, match="bucket_batches"):
        LengthBucketSampler(RandomSampler(range(3)), 2, lengths=[1, 2, 3], bucket_batches=0)


@pytest.mark.parametrize("generator_on_batches", [True, False])
def test_resumable_bucketed_loader_continues_mid_epoch_with_the_same_batches(generator_on_batches):
    reference = make_resumable(_loader(generator_on_batches=generator_on_batches))
    epochs = [_epoch(reference) for _ in range(3)]
    first = make_resumable(_loader(generator_on_batches=generator_on_batches))
    _epoch(first)
    assert _epoch(first, n=5) == epochs[1][:5]
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = make_resumable(_loader(seed=99, generator_on_batches=generator_on_batches))  # a new process
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert _epoch(resumed) == epochs[1][5:]  # the rest of epoch 1, nothing replayed
    assert _epoch(resumed) == epochs[2]


def test_text_datamodule_buckets_its_training_batches(tmp_path):
    from seqattn.modalities.text.data import TaggingDataModule

    dm = TaggingDataModule(data_dir=tmp_path, batch_size=16, bucket_by_length=True,
                           synth={"n_train": 300, "n_val": 20, "n_test": 20})
    dm.setup()
    loader = dm.train_dataloader()
    assert isinstance(loader.batch_sampler, LengthBucketSampler)
    lengths = dm.item_lengths(dm.datasets["train"])
    batches = list(loader.batch_sampler)
    assert sorted(i for b in batches for i in b) == list(range(300))
    plain = TaggingDataModule(data_dir=tmp_path, batch_size=16, synth={"n_train": 300, "n_val": 20, "n_test": 20})
    plain.setup()
    assert not isinstance(plain.train_dataloader().batch_sampler, LengthBucketSampler)
    assert padding_fraction(batches, lengths) < padding_fraction(list(plain.train_dataloader().batch_sampler),
                                                                 lengths)
    val = [b for b in dm.val_dataloader().batch_sampler]  # validation: sorted once, shortest first, fixed
    val_lengths = dm.item_lengths(dm.datasets["val"])
    assert [i for b in val for i in b] == sorted(range(20), key=val_lengths.__getitem__)
    assert [b for b in dm.val_dataloader().batch_sampler] == val
    test = [b for b in dm.test_dataloader().batch_sampler]  # test (figures, predictions): the file's order
    assert [i for b in test for i in b] == list(range(20))
    assert [i for b in plain.val_dataloader().batch_sampler for i in b] == list(range(20))  # no buckets: in order


def test_an_unshuffled_sampler_sorts_once_and_draws_nothing():
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    sampler = LengthBucketSampler(list(range(len(LENGTHS))), 8, False, lengths=LENGTHS,
                                  bucket_batches=len(LENGTHS), generator=g, shuffle=False)
    batches = list(sampler)
    assert [i for b in batches for i in b] == sorted(range(len(LENGTHS)), key=LENGTHS.__getitem__)
    assert list(sampler) == batches and torch.equal(g.get_state(), state)
    assert all(len(b) == 8 for b in batches[:-1]) and len(batches) == len(sampler)
