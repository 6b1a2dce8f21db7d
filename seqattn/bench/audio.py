"""Audio on CPU, log-mel features: torchaudio's ``Spectrogram`` power (``|z|²``) vs seqattn's (``re² + im²``).

``python -m seqattn.bench audio [--threads 1] [--repeats 200] [--out F.md]``: the audio adapter's
feature forward (:class:`~seqattn.modalities.audio.features.AudioFeatures`: STFT power, mel filters, log,
per-utterance normalisation) on the recipes' batches, and one whole training step of speech_ctc's network
(audio adapter, time subsampling by 3, 3 Conformer layers 96 wide with a 15-token convolution module,
CTC loss, AdamW) on an FSDD-like batch, with
:data:`seqattn.modalities.audio.features.FAST_POWER` off and on. The two sides alternate within every
round; the table gives the median per call and their ratio. Both sides compute the same values to within
float rounding (``tests/modalities/audio/test_adapter.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from seqattn.bench.measure import switch_side_by_side, switch_table
from seqattn.modalities.audio import features as feats

#: (cell, sample rate, batch, seconds per clip): FSDD's 8 kHz recordings resampled to the recipes' 16 kHz
CELLS = (
    ("speech_ctc / speech_cls on FSDD: 32 clips × 0.5 s at 16 kHz", 16000, 32, 0.5),
    ("spoken words: 32 clips × 1 s at 16 kHz", 16000, 32, 1.0),
    ("8 kHz input: 32 clips × 0.5 s", 8000, 32, 0.5),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (the recipes' default on CPU: 1)")
    parser.add_argument("--repeats", type=int, default=200, help="calls per cell and side (steps: a tenth)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this markdown file")


def _batch(sample_rate: int, batch: int, seconds: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``waveform [batch, T]`` of noise, ``lengths [batch]`` spread over ``[T/2, T]`` (a padded batch)."""
    g = torch.Generator().manual_seed(0)
    t = int(sample_rate * seconds)
    lengths = torch.randint(t // 2, t + 1, (batch,), generator=g)
    lengths[0] = t
    wav = torch.randn(batch, t, generator=g) * (torch.arange(t)[None] < lengths[:, None])
    return wav, lengths


def _features_call(sample_rate: int, batch: int, seconds: float):
    f = feats.AudioFeatures(sample_rate, 25.0, 10.0, "logmel", n_mels=40, f_max=4000.0)
    wav, lengths = _batch(sample_rate, batch, seconds)

    def step():
        f(wav, lengths)
    return step


def ctc_step(batch: int = 32, seconds: float = 0.5):
    """One training step (forward, backward, AdamW) of speech_ctc's default network on ``batch`` clips of up
    to ``seconds`` at 16 kHz (5-letter targets over 15 letters). Seeded: the same step for every side."""
    from seqattn.core import Encoder
    from seqattn.modalities.audio.adapter import AudioAdapter
    from seqattn.model.subsample import TimeSubsampling

    torch.manual_seed(0)
    adapter, sub = AudioAdapter(96), TimeSubsampling(96, factor=3, mode="conv")
    encoder, head = Encoder(96, 3, 4, ff_mult=2, dropout=0.1, conv_kernel=15), torch.nn.Linear(96, 16)
    modules = torch.nn.ModuleList([adapter, sub, encoder, head])
    optimizer = torch.optim.AdamW(modules.parameters(), lr=2e-3)
    wav, lengths = _batch(16000, batch, seconds)
    targets = torch.randint(1, 16, (batch, 5))

    def step():
        tokens = sub(adapter(wav, lengths))
        logp = head(encoder(tokens.x, mask=tokens.mask)).log_softmax(-1).transpose(0, 1)  # [L, B, 16]
        loss = torch.nn.functional.ctc_loss(logp, targets, tokens.mask.sum(1), torch.full((batch,), 5))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


def _switch(enabled: bool) -> None:
    feats.FAST_POWER = enabled


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    rows = []
    for name, sr, batch, seconds in CELLS:
        slow, quick = switch_side_by_side(lambda a=(sr, batch, seconds): _features_call(*a), _switch, args.repeats)
        rows.append((f"log-mel features, {name}", slow, quick))
    slow, quick = switch_side_by_side(ctc_step, _switch, max(10, args.repeats // 10))
    rows.append(("speech_ctc training step (adapter, 3 Conformer layers 96 wide, 32 clips × 0.5 s)", slow, quick))
    switch_table(args, "audio", "torchaudio abs(z)²", "seqattn re² + im²", rows)
    return 0
