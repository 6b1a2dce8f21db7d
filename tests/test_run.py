"""End to end: `python -m seqattn.run task=speech` on a tiny built-in corpus learns and writes its artefacts."""

import json
from pathlib import Path

import pytest
import torch

from seqattn.objectives import SequenceLabeling
from seqattn.run import train
from tests.workflows import accuracy_from_confusion, macro_f1_from_confusion, majority_accuracy

TINY = [
    "task=speech",
    "data.synth.n_train_speakers=3", "data.synth.n_val_speakers=1", "data.synth.n_test_speakers=1",
    "data.synth.utts_per_speaker={train:14,val:8,test:10}",
    "data.batch_size=8",
    "model.dim=48",
    "model.depth=2",
    "trainer.max_epochs=6",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks.early_stopping=null",
]


def test_speech_recipe_learns_and_writes_its_artefacts(compose_cfg):
    cfg = compose_cfg(TINY)
    metrics = train(cfg)
    out = Path(metrics["output_dir"])
    assert (out / "config.yaml").is_file()
    assert (out / "checkpoints" / "best.ckpt").is_file() and (out / "checkpoints" / "last.ckpt").is_file()
    assert (out / "test_utterance.png").stat().st_size > 10_000
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["test/acc"] == pytest.approx(metrics["test/acc"])
    assert saved["test/acc"] == pytest.approx(accuracy_from_confusion(saved["confusion_matrix"]), abs=1e-6)
    assert saved["test/f1"] == pytest.approx(macro_f1_from_confusion(saved["confusion_matrix"]), abs=1e-5)
    assert saved["test/f1"] != pytest.approx(saved["test/acc"], abs=1e-3)  # macro, not micro: they differ here

    from hydra.utils import instantiate

    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("test")
    majority = majority_accuracy(datamodule)
    assert metrics["test/acc"] > majority + 0.15, (metrics["test/acc"], majority)

    # the checkpoint rebuilds the model without Hydra and carries labels and the run config
    model = SequenceLabeling.load_from_checkpoint(out / "checkpoints" / "best.ckpt", map_location="cpu")
    assert model.labels == datamodule.label_names
    assert model.run_config["task_name"] == "speech"
    batch = next(iter(datamodule.test_dataloader()))
    model.eval()
    with torch.no_grad():
        logits = model(batch)["logits"]
    assert logits.shape[:2] == batch["labels"].shape


def test_no_context_baseline_runs_through_the_same_recipe(compose_cfg):
    cfg = compose_cfg(TINY + ["model=no_context", "model.dim=48", "trainer.max_epochs=2", "plot=true"])
    metrics = train(cfg)
    assert metrics["encoder"] == "TokenwiseMLP"
    assert Path(metrics["figure"]).is_file()


@pytest.mark.slow
def test_attention_beats_the_no_context_baseline(compose_cfg, tmp_path):
    """On a small corpus, attention's test frame accuracy is above the context-free baseline's."""
    common = [
        "task=speech",
        "data.synth.n_train_speakers=6", "data.synth.n_test_speakers=2",
        "data.synth.utts_per_speaker={train:40,val:20,test:30}",
        "data.batch_size=16",
        "trainer.max_epochs=16",
        "trainer.enable_progress_bar=false",
        "plot=false",
    ]
    data_dir = tmp_path / "data"
    attention = train(compose_cfg(common + ["model.dim=64"], data_dir=data_dir, run="attention"))
    baseline = train(compose_cfg(common + ["model=no_context", "model.dim=64"], data_dir=data_dir, run="baseline"))
    assert attention["test/acc"] > baseline["test/acc"], (attention["test/acc"], baseline["test/acc"])

    def stops(m):  # stop closures look like silence: only context tells p, t and k apart from sil
        return sum(m[f"test/acc_{s}"] for s in ("p", "t", "k")) / 3

    print(f"attention acc {attention['test/acc']:.4f} stops {stops(attention):.4f}; "
          f"no context acc {baseline['test/acc']:.4f} stops {stops(baseline):.4f}")
    assert stops(attention) > stops(baseline) + 0.15, (stops(attention), stops(baseline))
