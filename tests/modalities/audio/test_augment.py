"""Training-only augmentation in the audio adapter: speed, crop, shift, noise at an SNR, SpecAugment masks, VTLP."""

from __future__ import annotations

import math

import pytest
import torch

from seqattn.modalities.audio.adapter import AudioAdapter
from seqattn.modalities.audio.augment import AugmentedAudioAdapter, SpecAugment, WaveAugment
from seqattn.modalities.audio.features import AudioFeatures, warp_frequencies

ALL = dict(speed=(0.9, 1.0, 1.1), crop=0.8, shift_ms=50, noise_p=1.0, snr_db=(5, 20), time_masks=2,
           time_mask_frames=8, freq_masks=2, freq_mask_bins=6, warp=0.1)


def _batch():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([16000, 9000, 4000])
    wave = torch.randn(3, 16000, generator=g) * 0.1
    wave[torch.arange(16000)[None] >= lengths[:, None]] = 0.0
    return wave, lengths


def test_eval_mode_is_exactly_the_plain_adapter():
    torch.manual_seed(0)
    plain = AudioAdapter(16)
    augmented = AugmentedAudioAdapter(16, **ALL)
    augmented.load_state_dict(plain.state_dict())  # same parameters, same keys
    assert set(augmented.state_dict()) == set(plain.state_dict())
    wave, lengths = _batch()
    augmented.eval()
    a, b = augmented(wave, lengths), plain(wave, lengths)
    torch.testing.assert_close(a.x, b.x, rtol=0, atol=0)
    assert torch.equal(a.mask, b.mask)
    augmented.train()
    trained = augmented(wave, lengths)
    n = min(trained.x.shape[1], a.x.shape[1])  # a speed change makes clips longer or shorter
    both = trained.mask[:, :n] & a.mask[:, :n]
    assert not torch.allclose(trained.x[:, :n][both], a.x[:, :n][both])
    # off by config: training mode computes the plain features too
    off = AugmentedAudioAdapter(16).train()
    off.load_state_dict(plain.state_dict())
    torch.testing.assert_close(off(wave, lengths).x, plain(wave, lengths).x, rtol=0, atol=0)


def test_crop_keeps_a_contiguous_share_and_padding_stays_zero():
    wave = torch.arange(1, 16001, dtype=torch.float32).repeat(3, 1)
    lengths = torch.tensor([16000, 9000, 4000])
    wave[torch.arange(16000)[None] >= lengths[:, None]] = 0.0
    out, new = WaveAugment(16000, crop=0.5)(wave, lengths)
    assert out.shape == wave.shape and bool((new >= (0.5 * lengths).long()).all()) and bool((new <= lengths).all())
    for i in range(3):
        n = int(new[i])
        kept = out[i, :n]
        assert torch.equal(kept[1:] - kept[:-1], torch.ones(n - 1))  # contiguous samples of the clip
        assert 1 <= float(kept[0]) and float(kept[-1]) <= float(lengths[i])  # from inside the clip
        assert not out[i, n:].any()


def test_shift_rotates_each_clip_within_its_length():
    wave = torch.arange(1, 1001, dtype=torch.float32).repeat(2, 1)
    lengths = torch.tensor([1000, 600])
    wave[1, 600:] = 0.0
    out, new = WaveAugment(16000, shift_ms=20)(wave, lengths)  # up to 320 samples
    assert torch.equal(new, lengths)
    for i in range(2):
        n = int(lengths[i])
        assert sorted(out[i, :n].tolist()) == wave[i, :n].tolist()  # a permutation ...
        offset = int(torch.nonzero(out[i, :n] == 1).item())
        assert torch.equal(out[i, :n], wave[i, :n].roll(offset))  # ... that is a rotation
        assert not out[i, n:].any()


def test_noise_is_added_at_the_asked_snr_inside_each_clip():
    wave, lengths = _batch()
    out, _ = WaveAugment(16000, noise_p=1.0, snr_db=(20.0, 20.0))(wave, lengths)
    for i, n in enumerate(lengths.tolist()):
        noise = out[i, :n] - wave[i, :n]
        snr = 10 * torch.log10(wave[i, :n].pow(2).sum() / noise.pow(2).sum())
        assert float(snr) == pytest.approx(20.0, abs=1e-3)
        assert not out[i, n:].any()
    same, _ = WaveAugment(16000, noise_p=0.0)(wave, lengths)
    assert torch.equal(same, wave)


def _peak_hz(x: torch.Tensor, sample_rate: int) -> float:
    return float(torch.fft.rfft(x).abs().argmax()) * sample_rate / x.numel()


@pytest.mark.parametrize("factor", [0.9, 1.1, 0.8])
def test_speed_changes_each_clips_length_and_pitch_by_its_factor(factor):
    sr = 16000
    lengths = torch.tensor([16000, 8000, 4000])
    wave = torch.sin(2 * math.pi * 440 * torch.arange(16000) / sr).repeat(3, 1)
    wave[torch.arange(16000)[None] >= lengths[:, None]] = 0.0
    out, new = WaveAugment(sr, speed=[factor])(wave, lengths)
    assert new.tolist() == [math.ceil(n / factor) for n in lengths.tolist()]  # it lasts 1/factor as long
    assert out.shape == (3, int(new.max()))
    for i in range(3):
        n = int(new[i])
        assert _peak_hz(out[i, :n], sr) == pytest.approx(440 * factor, abs=3.0)  # the tone moves by factor
        assert abs(float(out[i, : n // 2].abs().max()) - 1.0) < 0.02  # the resampled tone keeps its level
        assert not out[i, n:].any()  # the resampler's tails are cut: padding stays zero


def test_speed_factors_are_drawn_per_clip_and_one_leaves_a_clip_unchanged():
    sr = 16000
    wave, lengths = _batch()
    same, new = WaveAugment(sr, speed=[1.0])(wave, lengths)
    assert torch.equal(same, wave) and torch.equal(new, lengths)
    wave = wave[:1].repeat(64, 1)
    lengths = lengths[:1].repeat(64)
    torch.manual_seed(0)
    _, new = WaveAugment(sr, speed=[0.9, 1.0, 1.1])(wave, lengths)
    assert set(new.tolist()) == {math.ceil(16000 / 0.9), 16000, math.ceil(16000 / 1.1)}  # each factor drawn


def test_speed_resamples_in_fp32_under_bf16_autocast():
    wave, lengths = _batch()
    torch.manual_seed(0)
    plain = WaveAugment(16000, speed=[0.9, 1.1])(wave, lengths)
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = WaveAugment(16000, speed=[0.9, 1.1])(wave, lengths)
    assert mixed[0].dtype == torch.float32
    torch.testing.assert_close(mixed[0], plain[0], rtol=0, atol=0)
    assert torch.equal(mixed[1], plain[1])


def test_spec_augment_masks_bands_and_frames_with_zeros():
    feats = torch.ones(4, 50, 40)
    mask = torch.ones(4, 50, dtype=torch.bool)
    mask[1, 30:] = False
    feats[1, 30:] = 0.0
    out = SpecAugment(time_masks=0, freq_masks=1, freq_mask_bins=10)(feats, mask)
    zero_bins = (out[0] == 0).all(0)  # [C]: whole frequency bands
    assert int(zero_bins.sum()) == int((out[0] == 0).sum()) // 50 <= 10
    out = SpecAugment(time_masks=1, time_mask_frames=10, freq_masks=0, time_mask_p=1.0)(feats, mask)
    zero_frames = (out[0] == 0).all(-1)  # [F]: whole frames
    assert int(zero_frames.sum()) * 40 == int((out[0] == 0).sum()) and int(zero_frames.sum()) <= 10
    assert not out[1, 30:].any()


def test_warp_scales_frequencies_below_the_boundary_and_keeps_the_band_edges():
    spec = torch.rand(2, 101, 5)
    torch.testing.assert_close(warp_frequencies(spec, torch.ones(2)), spec, rtol=0, atol=0)
    tone = torch.zeros(3, 101, 1)
    tone[:, 40] = 1.0  # a tone at bin 40 (of 0..100 = Nyquist)
    moved = warp_frequencies(tone, torch.tensor([1.1, 0.9, 1.0]))[..., 0]  # [3, 101]
    assert moved.argmax(1).tolist() == [44, 36, 40]
    edges = torch.zeros(2, 101, 1)
    edges[:, 0] = edges[:, 100] = 1.0
    kept = warp_frequencies(edges, torch.tensor([1.1, 0.9]))[..., 0]
    assert kept[:, 0].tolist() == [1.0, 1.0] and kept[:, 100].tolist() == [1.0, 1.0]  # 0 Hz and Nyquist fixed
    with pytest.raises(ValueError, match=r"alpha must be \[B\] = \[2\]"):
        warp_frequencies(spec, torch.ones(3))


def test_warped_features_move_a_tone_up_the_mel_scale():
    t = torch.arange(16000) / 16000
    wave = torch.sin(2 * torch.pi * 1000 * t)[None].repeat(2, 1)  # a 1 kHz tone, twice
    feats = AudioFeatures(16000, normalize=False, n_mels=80)
    plain, _ = feats(wave)
    warped, _ = feats(wave, warp=torch.tensor([1.0, 1.15]))
    torch.testing.assert_close(warped[0], plain[0])  # factor 1: the plain features
    peak = lambda x: int(x.mean(0).argmax())  # noqa: E731  mel bin with the most energy
    assert peak(warped[1]) > peak(plain[0])  # 1.15 kHz sits in a higher mel filter


def test_warp_is_drawn_per_clip_in_training_only():
    torch.manual_seed(0)
    plain = AudioAdapter(16)
    warped = AugmentedAudioAdapter(16, warp=0.1)
    warped.load_state_dict(plain.state_dict())
    wave, lengths = _batch()
    torch.testing.assert_close(warped.eval()(wave, lengths).x, plain(wave, lengths).x, rtol=0, atol=0)
    warped.train()
    torch.manual_seed(1)
    a = warped(wave, lengths)
    torch.manual_seed(1)
    torch.testing.assert_close(warped(wave, lengths).x, a.x)  # drawn from torch's random state
    differs = [(a.x[i] - plain(wave, lengths).x[i]).abs().max() > 1e-3 for i in range(3)]
    assert all(differs)  # every clip warped (a factor of exactly 1 has probability 0)


def test_arguments_are_checked():
    for bad in (dict(crop=0.0), dict(shift_ms=-1), dict(noise_p=2.0), dict(snr_db=(30, 10))):
        with pytest.raises(ValueError):
            WaveAugment(16000, **bad)
    for bad in (0.9, "0.9", [3.0], [True], [0.0], ["fast"]):
        with pytest.raises(ValueError, match=r"speed=.* must be a list of factors in \[0.5, 2\]"):
            WaveAugment(16000, speed=bad)
    with pytest.raises(ValueError, match="speed factor 0.90001 times sample_rate=16000 is not a whole rate"):
        WaveAugment(16000, speed=[0.90001])
    with pytest.raises(ValueError, match="time_masks"):
        SpecAugment(time_masks=-1)
    with pytest.raises(ValueError, match=r"warp=1.2 must be in \[0, 1\)"):
        AugmentedAudioAdapter(16, warp=1.2)
    with pytest.raises(ValueError, match="features='raw' has none"):
        AugmentedAudioAdapter(16, features="raw", warp=0.1)


def test_a_distillation_teacher_is_shown_the_students_augmented_clips():
    from seqattn.core import Encoder
    from seqattn.model.heads import PooledHead
    from seqattn.model.network import SequenceModel
    from seqattn.objectives import SequenceClassification
    from seqattn.objectives.distill import Distillation

    class Recorder(torch.nn.Module):
        """A teacher that remembers the waveforms it was given."""

        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(1, 3)
            self.seen = []

        def forward(self, batch):
            self.seen.append(batch["waveform"].clone())
            return {"logits": torch.zeros(batch["waveform"].shape[0], 3)}

    torch.manual_seed(0)
    net = SequenceModel(AugmentedAudioAdapter(16, noise_p=1.0, shift_ms=20), Encoder(16, depth=1, heads=2),
                        PooledHead(16, 3))
    student = SequenceClassification(net=net, labels=["a", "b", "c"])
    teacher = Recorder()
    teacher.head.num_outputs = 3
    student.set_distillation(Distillation(teacher, 2.0, 0.5))
    wave, lengths = _batch()
    batch = {"waveform": wave, "lengths": lengths, "labels": torch.tensor([0, 1, 2])}
    student.train()
    student.loss(student(batch), batch)
    (seen,) = teacher.seen
    assert torch.equal(seen, net.adapter.augmented_inputs["waveform"]) and not torch.equal(seen, wave)
    student.eval()  # evaluation: no teacher, no augmentation
    student.loss(student(batch), batch)
    assert len(teacher.seen) == 1
