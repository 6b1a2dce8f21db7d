"""The progress bar draws a few times a second, not after every step (its cost, issue 20)."""

from __future__ import annotations

from seqattn.training.callbacks import EpochProgressBar


def test_a_step_updates_the_bar_only_when_a_redraw_is_due_and_at_the_last_batch(monkeypatch):
    clock = iter([0.0, 0.1, 0.2, 0.26, 0.3, 0.31])
    monkeypatch.setattr("seqattn.training.callbacks.time.monotonic", lambda: next(clock))
    bar = EpochProgressBar()
    assert bar.refresh_rate == 4  # redraws per second
    due = [bar._due(i, total=6) for i in range(6)]
    # t=0 due; 0.1, 0.2 within 1/4 s of it; 0.26 due; 0.3 not; the epoch's last batch always
    assert due == [True, False, False, True, False, True]


def test_the_refresh_rate_is_an_option():
    assert EpochProgressBar(refresh_rate=10).refresh_rate == 10
