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


def test_short_epochs_neither_draw_on_the_training_thread_nor_pile_up_validation_tasks(tmp_path, monkeypatch):
    """One-step epochs (task=social): Rich's add_task / reset redraw at once on the training thread, a few ms
    every epoch, and Lightning adds a hidden validation task per epoch that every redraw walks. The bar defers
    those redraws to its refresh thread and removes the replaced task; stopping still draws the final epoch."""
    import threading

    import lightning as L
    from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
    from rich.console import Console
    from rich.progress import Progress
    from torch.utils.data import DataLoader

    class OneStepEpochs(BoringModel):
        def train_dataloader(self):
            return DataLoader(RandomDataset(32, 4), batch_size=4)

        def val_dataloader(self):
            return DataLoader(RandomDataset(32, 4), batch_size=4)

    drawn_here, last_text = [], []
    render = Progress.get_renderable

    def spy(progress):
        renderable = render(progress)
        if threading.current_thread() is threading.main_thread():
            drawn_here.append(1)
            console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
            console.print(renderable)
            last_text.append(console.export_text())
        return renderable

    monkeypatch.setattr(Progress, "get_renderable", spy)
    bar = EpochProgressBar()
    trainer = L.Trainer(max_epochs=12, callbacks=[bar], logger=False, enable_checkpointing=False,
                        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(OneStepEpochs())
    assert len(bar.progress.tasks) <= 2  # the training task and the latest validation one (Lightning: 1 + 12)
    assert len(drawn_here) <= 3, len(drawn_here)  # start and stop (Lightning: ~2 per epoch)
    assert "Epoch 12/12" in last_text[-1]  # the final state is drawn
