"""Audio adapter: framing, feature shapes, file loading, padding invariance."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from seqattn.modalities.audio.adapter import AudioAdapter
from seqattn.modalities.audio.features import AudioFeatures, frame_labels, load_audio, num_frames
from seqattn.core.tokens import Tokens

SR = 16000


def test_num_frames():
    assert num_frames(400, 400, 160) == 1
    assert num_frames(399, 400, 160) == 0
    assert num_frames(0, 400, 160) == 0
    assert num_frames(16000, 400, 160) == 1 + (16000 - 400) // 160 == 98
    assert num_frames(559, 400, 160) == 1 and num_frames(560, 400, 160) == 2


def test_frame_labels_use_centre_sample():
    win, hop = 400, 160
    lab = {"sil": 0, "a": 1}
    # boundary at 0.0255 s = sample 408: frame 0 centre 200 -> sil, frame 1 centre 360 -> sil,
    # frame 2 centre 520 -> a
    segs = [(0.0, 0.0255, "sil"), (0.0255, 0.1, "a")]
    y = frame_labels(segs, 1600, SR, win, hop, lab)
    assert y.dtype == torch.long and y.shape == (num_frames(1600, win, hop),)
    centres = torch.arange(len(y)) * hop + win // 2
    assert torch.equal(y, (centres >= 408).long())


def test_frame_labels_uncovered_and_unknown():
    lab = {"sil": 0, "a": 1}
    y = frame_labels([(0.05, 0.08, "a")], 1600, SR, 400, 160, lab)
    assert set(y.tolist()) == {-100, 1}
    y = frame_labels([(0.05, 0.08, "a")], 1600, SR, 400, 160, lab, default="sil")
    assert set(y.tolist()) == {0, 1}
    with pytest.raises(ValueError, match=r"unknown label 'zz'.*'a', 'sil'"):
        frame_labels([(0.0, 0.1, "zz")], 1600, SR, 400, 160, lab)


@pytest.mark.parametrize("kind, dim", [("raw", 400), ("logmel", 40), ("mfcc", 20)])
def test_feature_shapes(kind, dim):
    feats = AudioFeatures(features=kind)
    assert feats.win == 400 and feats.hop == 160 and feats.feature_dim == dim
    assert not list(feats.parameters())
    wav = torch.randn(3, 8000)
    lengths = torch.tensor([8000, 4000, 400])
    x, mask = feats(wav, lengths)
    assert x.shape == (3, num_frames(8000, 400, 160), dim)
    assert mask.dtype == torch.bool
    assert mask.sum(1).tolist() == [num_frames(int(n), 400, 160) for n in lengths]
    assert torch.all(x[~mask] == 0)
    assert torch.isfinite(x).all()
    # normalised per utterance over its real frames
    real = x[0][mask[0]]
    assert torch.allclose(real.mean(0), torch.zeros(dim), atol=1e-4)
    assert torch.allclose(real.std(0, unbiased=False), torch.ones(dim), atol=1e-3)


def test_unknown_feature_type():
    with pytest.raises(ValueError, match=r"features='spectrum'.*'raw', 'logmel', 'mfcc'"):
        AudioFeatures(features="spectrum")


def test_one_dim_waveform_is_a_batch_of_one():
    x, mask = AudioFeatures()(torch.randn(4000))
    assert x.shape == (1, num_frames(4000, 400, 160), 40) and mask.all()


def test_too_short_and_empty_audio():
    feats = AudioFeatures()
    with pytest.raises(ValueError, match=r"batch item 1 has 100 samples \(6\.2 ms\).*window of 400 samples"):
        feats(torch.randn(2, 1000), torch.tensor([1000, 100]))
    with pytest.raises(ValueError, match="empty"):
        feats(torch.zeros(1, 0))
    with pytest.raises(ValueError, match="empty"):
        feats(torch.zeros(0))


@pytest.mark.parametrize("kind", ["raw", "logmel", "mfcc"])
def test_padded_batch_equals_each_item_alone(kind):
    torch.manual_seed(0)
    lengths = [6000, 3333, 401]
    items = [torch.randn(n) for n in lengths]
    batch = torch.zeros(3, 7000)  # extra padding beyond the longest item
    for i, w in enumerate(items):
        batch[i, : len(w)] = w
    adapter = AudioAdapter(dim=16, features=kind).eval()
    tok = adapter(batch, torch.tensor(lengths))
    assert isinstance(tok, Tokens)
    assert tok.x.shape[:2] == tok.mask.shape == tok.extra["features"].shape[:2]
    for i, w in enumerate(items):
        alone = adapter(w[None])
        n = alone.x.shape[1]
        assert tok.mask[i].sum() == n
        assert torch.allclose(tok.extra["features"][i, :n], alone.extra["features"][0], atol=1e-4)
        assert torch.allclose(tok.x[i, :n], alone.x[0], atol=1e-4)


def test_adapter_inputs_contract():
    adapter = AudioAdapter(dim=8)
    batch = {"waveform": torch.randn(2, 2000), "lengths": torch.tensor([2000, 1500]), "labels": None}
    tok = adapter(**{k: batch[k] for k in adapter.inputs})
    assert tok.x.shape == (2, num_frames(2000, 400, 160), 8)
    assert tok.extra["features"].shape == (2, num_frames(2000, 400, 160), 40)


def test_load_audio_stereo_and_resample(tmp_path):
    sr = 22050
    t = np.arange(sr) / sr  # 1 s
    stereo = np.stack([0.5 * np.sin(2 * np.pi * 440 * t), 0.1 * np.ones_like(t)], axis=1)  # [T, 2]
    path = tmp_path / "stereo.wav"
    sf.write(path, stereo, sr, subtype="FLOAT")
    wav = load_audio(path, SR)
    assert wav.dtype == torch.float32 and wav.dim() == 1
    assert abs(wav.numel() - SR) <= 1
    same = load_audio(path, sr)  # no resampling: the channel mean exactly
    assert same.numel() == sr
    assert torch.allclose(same, torch.from_numpy(stereo.mean(1)).float(), atol=1e-6)


def test_load_audio_errors(tmp_path):
    with pytest.raises(ValueError, match="missing.wav"):
        load_audio(tmp_path / "missing.wav", SR)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all")
    with pytest.raises(ValueError, match="bad.wav"):
        load_audio(bad, SR)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0), SR)
    with pytest.raises(ValueError, match=r"empty\.wav is empty"):
        load_audio(empty, SR)


def test_logmel_and_mfcc_are_the_framed_power_spectrum_written_out():
    """Frame ``f`` is samples ``f·hop .. f·hop + win`` (win 25 ms, hop 12 ms here), Hann-windowed; log-mel =
    ``log(|rfft|² @ mel filters + 1e-6)``; MFCC = the orthonormal DCT-II of the log-mel (scipy), its first
    ``n_mfcc`` coefficients."""
    import torchaudio
    from scipy.fft import dct

    sr, win, hop, n_mels = 8000, 200, 96, 12
    wav = torch.randn(1, 1500, generator=torch.Generator().manual_seed(0))
    logmel, _ = AudioFeatures(sr, 25.0, 12.0, "logmel", n_mels=n_mels, normalize=False)(wav)
    frames = torch.stack([wav[0, f * hop: f * hop + win] for f in range(num_frames(1500, win, hop))])  # [F, win]
    power = torch.fft.rfft(frames * torch.hann_window(win), dim=-1).abs() ** 2  # [F, win/2 + 1]
    filters = torchaudio.functional.melscale_fbanks(win // 2 + 1, 0.0, sr / 2, n_mels, sr)  # [freqs, n_mels]
    torch.testing.assert_close(logmel[0], torch.log(power @ filters + 1e-6), atol=1e-4, rtol=1e-4)
    mfcc, _ = AudioFeatures(sr, 25.0, 12.0, "mfcc", n_mels=n_mels, n_mfcc=7, normalize=False)(wav)
    want = dct(logmel[0].double().numpy(), type=2, norm="ortho", axis=-1)[:, :7]
    assert mfcc.shape[-1] == 7
    torch.testing.assert_close(mfcc[0].double(), torch.from_numpy(want), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("sr", [8000, 16000])
def test_power_spectrum_is_torchaudios_spectrogram(sr):
    """The STFT power as ``re² + im²`` (the fast path) equals torchaudio's ``Spectrogram(power=2)`` (``|z|²``) on a
    batch, and the log-mel built on it equals torchaudio's ``MelSpectrogram`` end to end."""
    f = AudioFeatures(sr, 25.0, 10.0, "logmel", n_mels=40, f_max=4000.0, normalize=False)
    wav = torch.randn(3, sr // 2, generator=torch.Generator().manual_seed(1)) * torch.tensor([[1.0], [0.01], [30.0]])
    want = f.mel.spectrogram(wav)  # [3, K, F]
    got = f.power_spectrum(wav)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    logmel, _ = f(wav)
    torch.testing.assert_close(logmel, torch.log(f.mel(wav) + 1e-6).transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_mel_band_f_max_drops_energy_above_it():
    """With ``f_max=4000`` a 6 kHz tone at 16 kHz leaves the log-mel features near the noise floor, while a
    1 kHz tone shows; without ``f_max`` (Nyquist) the 6 kHz tone shows too. The filters are the written-out
    mel filters of ``[f_min, f_max]``."""
    import torchaudio

    t = torch.arange(SR // 2) / SR  # 0.5 s
    quiet = 1e-4 * torch.randn(SR // 2, generator=torch.Generator().manual_seed(0))

    def peak(freq: float, **band) -> float:
        feats, _ = AudioFeatures(SR, features="logmel", normalize=False, **band)(torch.sin(2 * torch.pi * freq * t) + quiet)
        return float(feats.max())

    floor = peak(0.0, f_max=4000)  # silence plus the quiet noise (log power ~ -10.5)
    assert peak(1000.0, f_max=4000) > floor + 15  # ~ +9.3
    assert peak(6000.0, f_max=4000) < floor + 5  # only the Hann window's leakage (~ -7)
    assert peak(6000.0) > floor + 15  # ~ +9.3
    f = AudioFeatures(SR, features="logmel", n_mels=20, f_min=50, f_max=4000)
    assert (f.f_min, f.f_max) == (50.0, 4000.0)
    want = torchaudio.functional.melscale_fbanks(f.win // 2 + 1, 50.0, 4000.0, 20, SR)
    torch.testing.assert_close(f.mel.mel_scale.fb, want)
    assert AudioAdapter(8, f_max=4000).export_description()["preprocessing"]["features_inside_the_model"]["f_max"] == 4000


def test_f_max_above_nyquist_is_clipped_with_a_warning_naming_both(caplog):
    with caplog.at_level("WARNING", logger="seqattn.modalities.audio.features"):
        f = AudioFeatures(8000, features="logmel", f_max=8000)
    assert f.f_max == 4000.0
    assert "f_max=8000 Hz" in caplog.text and "Nyquist frequency 4000 Hz" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="seqattn.modalities.audio.features"):
        assert AudioFeatures(16000, features="logmel", f_max=8000).f_max == 8000.0  # at Nyquist: no warning
        assert AudioFeatures(16000, features="logmel").f_max == 8000.0  # None: Nyquist
    assert not caplog.text
    with pytest.raises(ValueError, match=r"f_min=4000.0 Hz must be in \[0, f_max=4000 Hz\)"):
        AudioFeatures(8000, features="logmel", f_min=4000)
    with pytest.raises(ValueError, match=r"f_max=-1.0 Hz must be positive"):
        AudioFeatures(8000, features="logmel", f_max=-1)


def _two_clips():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([SR // 2, SR // 4])
    waveform = 0.1 * torch.randn(2, SR // 2, generator=g) * (torch.arange(SR // 2)[None] < lengths[:, None])
    return {"waveform": waveform, "lengths": lengths}


def test_token_targets_are_the_clean_normalised_log_mel_frames_and_padding_is_never_maskable():
    batch = _two_clips()
    adapter = AudioAdapter(16)
    targets = adapter.token_targets(batch)
    layout = adapter.token_target_layout()
    assert (layout.kind, layout.size) == ("regression", 40) and targets.layout == layout
    frames = adapter.features.frame_lengths(batch["lengths"])  # real frames per clip
    assert targets.values.shape == (2, int(frames.max()), 40)
    assert targets.maskable.sum(1).tolist() == frames.tolist()  # padding frames are never maskable
    assert not targets.maskable[1, int(frames[1]):].any()
    tokens = adapter(**batch)
    assert tokens.x.shape[:2] == targets.maskable.shape and torch.equal(tokens.mask, targets.maskable)
    # the adapter's own features: per clip and bin, zero mean and unit variance over the real frames
    real = targets.values[0, : int(frames[0])]
    torch.testing.assert_close(real.mean(0), torch.zeros(40), atol=1e-4, rtol=0)
    torch.testing.assert_close(real.std(0, unbiased=False), torch.ones(40), atol=1e-3, rtol=0)
    # a clip's targets are the same bit for bit alone, in a padded batch and under bf16 autocast (evaluation
    # hides positions chosen by a hash of them: a DDP or bf16 test must hide the same frames)
    n = int(batch["lengths"][1])
    alone = adapter.token_targets({"waveform": batch["waveform"][1:, :n], "lengths": batch["lengths"][1:]})
    assert torch.equal(alone.values[0], targets.values[1, : int(frames[1])])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(adapter.token_targets(batch).values, targets.values)


def test_an_augmented_adapter_takes_targets_from_the_clean_clip_and_refuses_moving_augmentations():
    from seqattn.modalities.audio.augment import AugmentedAudioAdapter

    batch = _two_clips()
    clean = AudioAdapter(16).token_targets(batch)
    noisy = AugmentedAudioAdapter(16, noise_p=1.0, snr_db=(0, 0), time_masks=2, freq_masks=2).train()
    torch.manual_seed(0)
    seen = noisy(**batch).extra["features"]  # what a training forward reads: noise and SpecAugment
    assert not torch.allclose(seen, clean.values, atol=0.1)
    targets = noisy.token_targets(batch)
    torch.testing.assert_close(targets.values, clean.values, rtol=0, atol=0)  # from the clean clip
    for moving in ({"crop": 0.8}, {"shift_ms": 50}, {"speed": [0.9, 1.0]}):
        with pytest.raises(ValueError, match="moves the frames away from their clean targets"):
            AugmentedAudioAdapter(16, **moving).token_targets(batch)
