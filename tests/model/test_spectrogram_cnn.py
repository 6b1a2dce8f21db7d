"""SpectrogramCNN: the log-mel CNN baseline with the encoder's interface, on an audio adapter's features."""

import pytest
import torch

from seqattn.core import Tokens
from seqattn.model.baselines import SpectrogramCNN
from seqattn.model.heads import PooledHead
from seqattn.model.network import SequenceModel
from seqattn.modalities.audio.adapter import AudioAdapter


def test_output_is_one_vector_per_frame_and_a_padded_batch_equals_each_clip_alone():
    torch.manual_seed(0)
    adapter, cnn = AudioAdapter(16).eval(), SpectrogramCNN(16, channels=(4, 8), dilations=(1, 2), dropout=0.0).eval()
    short, long = torch.randn(3000) * 0.1, torch.randn(8000) * 0.1
    wave = torch.zeros(2, 8000)
    wave[0, :3000], wave[1] = short, long
    with torch.no_grad():
        tokens = adapter(wave, torch.tensor([3000, 8000]))
        out = cnn(tokens)
        alone = cnn(adapter(short[None], torch.tensor([3000])))
    assert out.shape == tokens.x.shape
    n = alone.shape[1]
    torch.testing.assert_close(out[0, :n], alone[0], rtol=1e-5, atol=1e-5)
    assert not out[0, n:].any()


def test_receptive_field_in_time_follows_the_dilations():
    torch.manual_seed(0)
    cnn = SpectrogramCNN(8, channels=(4, 4), dilations=(1, 2), dropout=0.0).eval()
    feats = torch.randn(1, 40, 12)
    x = torch.zeros(1, 40, 8)  # the residual path carries nothing: only the convolutions see the change
    changed = feats.clone()
    changed[0, 20] += 1.0
    with torch.no_grad():
        moved = (cnn(Tokens(x, extra={"features": feats})) - cnn(Tokens(x, extra={"features": changed}))
                 ).abs().sum(-1)[0] > 1e-6
    assert torch.nonzero(moved).flatten().tolist() == list(range(17, 24))  # ±(1 + 2) frames


def test_the_cnn_trains_inside_a_sequence_model_and_refuses_a_global_token():
    torch.manual_seed(0)
    net = SequenceModel(AudioAdapter(16), SpectrogramCNN(16, channels=(4, 8), dilations=(1, 2)), PooledHead(16, 3))
    batch = {"waveform": torch.randn(4, 4000), "lengths": torch.tensor([4000, 3000, 2000, 4000])}
    loss = torch.nn.functional.cross_entropy(net(batch)["logits"], torch.tensor([0, 1, 2, 0]))
    loss.backward()
    assert all(p.grad is not None for p in net.parameters())  # every parameter is used (DDP needs it)
    cls = SequenceModel(AudioAdapter(16), SpectrogramCNN(16), PooledHead(16, 3, pooling="cls"))
    with pytest.raises(ValueError, match="no global token"):
        cls(batch)
    with pytest.raises(ValueError, match="equal length"):
        SpectrogramCNN(16, channels=(4, 8), dilations=(1,))
