"""ConvEncoder: the CNN baseline with the encoder's interface, on an image adapter's grid."""

import pytest
import torch

from seqattn.modalities.image.adapter import ImageAdapter
from seqattn.model.baselines import ConvEncoder
from seqattn.core import Tokens


def test_receptive_field_is_depth_times_kernel():
    adapter, cnn = ImageAdapter(8, positional="none"), ConvEncoder(8, depth=2, kernel_size=3, dropout=0.0).eval()
    images = torch.rand(1, 3, 9, 9)
    changed = images.clone()
    changed[0, :, 4, 4] = torch.rand(3)
    with torch.no_grad():
        moved = ((cnn(adapter(images)) - cnn(adapter(changed))).abs().sum(-1)[0] > 1e-6).view(9, 9)
    expected = torch.zeros(9, 9, dtype=torch.bool)
    expected[2:7, 2:7] = True  # two 3×3 layers: a 5×5 receptive field
    assert torch.equal(moved, expected)


def test_padded_batch_equals_each_image_alone():
    adapter, cnn = ImageAdapter(8), ConvEncoder(8, depth=3, dropout=0.0).eval()
    small, big = torch.rand(1, 3, 4, 6), torch.rand(1, 3, 7, 7)
    batch = torch.rand(2, 3, 7, 7)  # padding filled with garbage
    batch[0, :, :4, :6], batch[1] = small[0], big[0]
    pixel_mask = torch.zeros(2, 7, 7, dtype=torch.bool)
    pixel_mask[0, :4, :6], pixel_mask[1] = True, True
    with torch.no_grad():
        out = cnn(adapter(batch, pixel_mask)).view(2, 7, 7, 8)
        torch.testing.assert_close(out[0, :4, :6].reshape(1, 24, 8), cnn(adapter(small)), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out[1].reshape(1, 49, 8), cnn(adapter(big)), atol=1e-5, rtol=1e-5)
        assert out[0, 4:].abs().sum() == 0 and out[0, :, 6:].abs().sum() == 0


def test_needs_an_image_grid_and_no_global_token():
    cnn = ConvEncoder(8)
    with pytest.raises(ValueError, match="grid"):
        cnn(Tokens(torch.rand(1, 4, 8)))
    with pytest.raises(ValueError, match="global token"):
        cnn(Tokens(torch.rand(1, 5, 8), grid=(2, 2), num_global=1))
    with pytest.raises(ValueError, match="odd"):
        ConvEncoder(8, kernel_size=2)
