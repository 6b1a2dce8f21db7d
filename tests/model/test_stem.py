"""SpectrogramStem: 2-D convolutions over an audio adapter's features, added to each frame's token."""

import pytest
import torch

from seqattn.core import Encoder, Tokens
from seqattn.core.tokens import prepend_global_token
from seqattn.model.heads import PooledHead
from seqattn.model.network import SequenceModel
from seqattn.model.stem import SpectrogramStem
from seqattn.modalities.audio.adapter import AudioAdapter


def _two_clips(stem):
    """A padded batch of a short and a long clip through ``AudioAdapter(16)`` and ``stem`` (eval, no grad):
    ``(adapter tokens, stem output, the stem's output for the short clip alone)``."""
    torch.manual_seed(0)
    adapter, stem = AudioAdapter(16).eval(), stem.eval()
    short, long = torch.randn(3000) * 0.1, torch.randn(8000) * 0.1
    wave = torch.zeros(2, 8000)
    wave[0, :3000], wave[1] = short, long
    with torch.no_grad():
        tokens = adapter(wave, torch.tensor([3000, 8000]))
        return tokens, stem(tokens), stem(adapter(short[None], torch.tensor([3000])))


def test_one_token_per_frame_and_a_padded_batch_equals_each_clip_alone():
    torch.manual_seed(0)
    tokens, out, alone = _two_clips(SpectrogramStem(16, channels=(4, 8), dilations=(1, 2)))
    assert out.x.shape == tokens.x.shape and torch.equal(out.mask, tokens.mask)
    n = alone.x.shape[1]
    torch.testing.assert_close(out.x[0, :n], alone.x[0], rtol=1e-5, atol=1e-5)
    assert not out.x[0, n:].any()
    assert not torch.allclose(out.x[0, :n], tokens.x[0, :n])  # the convolutions changed the tokens


def test_each_token_sees_the_features_of_its_neighbours_within_the_receptive_field():
    torch.manual_seed(0)
    stem = SpectrogramStem(8, channels=(4, 4), dilations=(1, 2), dropout=0.0).eval()
    feats, x = torch.randn(1, 40, 12), torch.randn(1, 40, 8)
    changed = feats.clone()
    changed[0, 20] += 1.0
    with torch.no_grad():
        moved = (stem(Tokens(x, extra={"features": feats})).x
                 - stem(Tokens(x, extra={"features": changed})).x).abs().sum(-1)[0] > 1e-6
    assert torch.nonzero(moved).flatten().tolist() == list(range(17, 24))  # ±(1 + 2) frames


def test_the_stem_trains_inside_a_sequence_model_and_refuses_what_it_cannot_convolve():
    torch.manual_seed(0)
    net = SequenceModel(AudioAdapter(16), Encoder(16, depth=1, heads=2), PooledHead(16, 3, pooling="cls"),
                        subsample=SpectrogramStem(16, channels=(4, 8), dilations=(1, 2)))
    batch = {"waveform": torch.randn(4, 4000), "lengths": torch.tensor([4000, 3000, 2000, 4000])}
    loss = torch.nn.functional.cross_entropy(net(batch)["logits"], torch.tensor([0, 1, 2, 0]))
    loss.backward()
    stem_params = list(net.subsample.parameters())
    assert stem_params and all(p.grad is not None and p.grad.abs().sum() > 0 for p in stem_params)
    stem = SpectrogramStem(16)
    with pytest.raises(ValueError, match="features"):
        stem(Tokens(torch.randn(1, 5, 16)))
    with pytest.raises(ValueError, match="plain frame sequences"):
        stem(prepend_global_token(Tokens(torch.randn(1, 5, 16), extra={"features": torch.randn(1, 5, 40)}),
                                  torch.zeros(16)))


def test_time_factor_merges_frames_after_the_cnn_and_a_padded_batch_still_equals_each_clip_alone():
    torch.manual_seed(0)
    stem = SpectrogramStem(16, channels=(4, 8), dilations=(1, 2), time_factor=2)
    tokens, out, alone = _two_clips(stem)
    frames = tokens.mask.sum(1)
    with torch.no_grad():
        # the same as the CNN's per-frame tokens merged by TimeSubsampling with the stem's own projection
        per_frame = stem.cnn(tokens)
        expected = stem.time(Tokens(x=per_frame, mask=tokens.mask, extra=dict(tokens.extra)))
    assert out.x.shape[1] == (tokens.x.shape[1] + 1) // 2
    assert out.mask.sum(1).tolist() == ((frames + 1) // 2).tolist()  # ceil(frames / 2) real tokens per clip
    torch.testing.assert_close(out.x, expected.x)
    n = alone.x.shape[1]
    torch.testing.assert_close(out.x[0, :n], alone.x[0], rtol=1e-5, atol=1e-5)
    assert not out.x[0, n:].any()
    assert out.extra["subsample"] == 2
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=r"factor must be an int >= 1"):
            SpectrogramStem(16, time_factor=bad)
