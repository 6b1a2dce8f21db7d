"""End to end: `task=speech_pretrain` learns to restore hidden log-mel frames of unlabelled clips, its
checkpoint refuses to predict, and `task=speech_cls` / `task=speech` with `init_from=<it>` start from its
adapter and encoder with a new head."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from hydra.utils import instantiate

import seqattn
from seqattn.run import build_objective, finetune_options, train
from seqattn.training.checkpoint import read_checkpoint
from tests.pretrain_checks import assert_starts_from_pretraining

QUIET = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "callbacks.early_stopping=null",
         "plot=false", "cpu_threads=1"]
MODEL = ["model.dim=32", "model.depth=2", "model.heads=2", *QUIET]
CLIPS = ["data.synth.words=[kasu,tami,puni,shafi]", "data.synth.n_train_speakers=4", "data.synth.n_val_speakers=1",
         "data.synth.n_test_speakers=2", "data.synth.clips_per_word={train:4,val:2,test:3}", "data.batch_size=16"]
SPEECH = ["data.synth.n_train_speakers=2", "data.synth.n_val_speakers=1", "data.synth.n_test_speakers=1",
          "data.synth.utts_per_speaker={train:6,val:4,test:4}", "data.batch_size=8"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    from tests.workflows import compose

    out = tmp_path_factory.mktemp("pretrain")
    cfg = compose(["task=speech_pretrain", *CLIPS, *MODEL, "trainer.max_epochs=8", "objective.optimizer.lr=5e-3"],
                  out / "run", out / "data")
    return train(cfg), out


def _objective(cfg):
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return build_objective(cfg, datamodule)


@pytest.mark.slow
def test_pretraining_lowers_the_hidden_frames_loss_and_refuses_to_predict(pretrained, tmp_path):
    metrics, _ = pretrained
    with open(Path(metrics["output_dir"]) / "csv" / "metrics.csv", newline="") as f:
        val = [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]
    assert len(val) >= 8 and val[-1] < 0.9 * val[0] and val[-1] < min(val[:3]), val  # the hidden frames' loss falls
    checkpoint = read_checkpoint(metrics["best_checkpoint"])
    assert checkpoint["seqattn_config"]["task_name"] == "speech_pretrain"
    assert checkpoint["state_dict"]["net.head.net.1.weight"].shape[0] == 40  # a head over the 40 log-mel bins
    with pytest.raises(ValueError, match=r"pretraining checkpoint.*nothing to predict with.*init_from="):
        seqattn.load(metrics["best_checkpoint"])


@pytest.mark.slow
@pytest.mark.parametrize("task", ["speech_cls", "speech"])
def test_fine_tuning_starts_from_the_pretrained_adapter_and_encoder_with_a_new_head(pretrained, task, tmp_path,
                                                                                      caplog):
    from tests.workflows import compose

    metrics, out = pretrained
    ckpt = metrics["best_checkpoint"]
    # the pretrained net has no conv stem, and its adapter reads speech_pretrain's 40 mels (speech_cls's default: 64)
    data = CLIPS + ["model=transformer", "adapter.n_mels=40"] if task == "speech_cls" else SPEECH
    cfg = compose([f"task={task}", *data, *MODEL, "trainer.max_epochs=1", f"init_from={ckpt}"], tmp_path / "ft",
                  out / "data")
    assert_starts_from_pretraining(_objective(cfg), finetune_options(cfg), caplog, must_load=("net.adapter.proj.",))
    trained = train(cfg)  # and it trains
    assert 0.0 <= trained["test/acc"] <= 1.0


def test_unlabelled_clips_are_read_from_a_folder_or_a_manifest_without_labels(compose_cfg, tmp_path):
    import numpy as np
    import soundfile as sf

    (tmp_path / "clips" / "sub").mkdir(parents=True)
    for i in range(10):
        sf.write(tmp_path / "clips" / ("sub" if i % 2 else "") / f"c{i}.wav",
                 np.random.default_rng(i).normal(size=3000 + 300 * i).astype(np.float32) * 0.1, 16000)
    sf.write(tmp_path / "clips" / "short.wav", np.zeros(100, dtype=np.float32), 16000)  # under one window: skipped
    rows = "".join(f"{'sub/' if i % 2 else ''}c{i}.wav,spk{i % 5},{'train' if i < 6 else 'val' if i < 8 else 'test'}\n"
                   for i in range(10))
    (tmp_path / "clips" / "m.csv").write_text("path,speaker,split\n" + rows)
    for source, n, method in ((tmp_path / "clips", 10, "by clip at random"),
                              (tmp_path / "clips" / "m.csv", 10, "given (split column)")):
        cfg = compose_cfg(["task=speech_pretrain", f"data.manifest={source}", "data.val_fraction=0.2",
                           "data.test_fraction=0.2"])
        data = instantiate(cfg.data)
        data.setup("fit")
        assert data.source == "manifest" and sum(data.split_sizes().values()) == n and data.split_method == method
        batch = next(iter(data.train_dataloader()))
        assert "labels" not in batch and batch["waveform"].dim() == 2 and batch["lengths"].shape == (len(batch["ids"]),)
        assert data.spec().labels is None
    assert data.split_sizes() == {"train": 6, "val": 2, "test": 2}
    with pytest.raises(Exception, match="train_fraction=0.5 is for labelled clips"):  # hydra wraps the ValueError
        instantiate(compose_cfg(["task=speech_pretrain", "data.train_fraction=0.5"]).data)
