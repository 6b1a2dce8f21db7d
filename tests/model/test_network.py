"""The whole network (audio adapter -> encoder -> head): batched == one at a time."""

import pytest
import torch

from seqattn.modalities.audio.adapter import AudioAdapter
from seqattn.model.baselines import WindowMLP
from seqattn.core import Encoder
from seqattn.model.heads import PooledHead, TokenHead
from seqattn.model.network import SequenceModel


@pytest.mark.parametrize("encoder", ["attention", "local", "window_mlp"])
def test_padded_batch_predictions_equal_one_at_a_time(encoder):
    dim = 32
    body = {
        "attention": lambda: Encoder(dim, 2, 4, dropout=0.0),
        "local": lambda: Encoder(dim, 2, 4, dropout=0.0, window=3),
        "window_mlp": lambda: WindowMLP(dim, window=2, dropout=0.0),
    }[encoder]()
    net = SequenceModel(AudioAdapter(dim), body, TokenHead(dim, 5)).eval()
    lengths = torch.tensor([16000, 9000, 4000])
    waveform = torch.randn(3, 16000) * (torch.arange(16000)[None] < lengths[:, None])
    with torch.no_grad():
        out = net({"waveform": waveform, "lengths": lengths})
        for i, n in enumerate(lengths.tolist()):
            alone = net({"waveform": waveform[i : i + 1, :n], "lengths": lengths[i : i + 1]})
            frames = int(out["mask"][i].sum())
            assert frames == alone["logits"].shape[1]
            torch.testing.assert_close(out["logits"][i, :frames], alone["logits"][0], atol=1e-4, rtol=1e-4)


def test_pooled_head_network_and_missing_batch_keys():
    net = SequenceModel(AudioAdapter(16), Encoder(16, 1, 2), PooledHead(16, 3)).eval()
    out = net({"waveform": torch.randn(2, 8000), "lengths": torch.tensor([8000, 5000])})
    assert out["logits"].shape == (2, 3)
    with pytest.raises(ValueError, match=r"batch lacks \['lengths'\] needed by AudioAdapter"):
        net({"waveform": torch.randn(2, 8000)})
