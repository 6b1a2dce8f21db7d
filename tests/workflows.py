"""Shared pieces of the workflow tests (predict, fine-tune, resume, sweeps, DDP, export).

Every workflow test is parametrized over ``WORKFLOW_TASKS``. To cover a new task, add ONE entry
to ``TASKS``: the overrides of a tiny run that learns something in seconds, and a function that
writes a few unlabelled inputs in the task's predict format (``(run_dir, cfg, folder) -> path``
given to ``predict_loader``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from omegaconf import DictConfig

QUIET = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks.early_stopping=null",
    "plot=false",
]


def _speech_inputs(cfg: DictConfig, folder: Path) -> Path:
    """A folder of five test-split WAV files of the built-in corpus (different lengths)."""
    from seqattn.modalities.audio.manifest import read_manifest
    from seqattn.modalities.audio.corpus import generate_speech_corpus

    manifest = generate_speech_corpus(cfg.data.data_dir, **cfg.data.synth)
    folder.mkdir(parents=True, exist_ok=True)
    items = [it for it in read_manifest(manifest) if it["split"] == "test"][:5]
    for it in items:
        shutil.copy(it["path"], folder / Path(it["path"]).name)
    return folder


def _clip_inputs(cfg: DictConfig, folder: Path) -> Path:
    """A folder of five test-split clips of the built-in spoken-word corpus (different words and lengths)."""
    from seqattn.modalities.audio.manifest import read_clip_manifest
    from seqattn.modalities.audio.words import generate_words_corpus

    manifest = generate_words_corpus(cfg.data.data_dir, **cfg.data.synth)
    folder.mkdir(parents=True, exist_ok=True)
    items = [it for it in read_clip_manifest(manifest) if it["split"] == "test"][::2][:5]
    for it in items:
        shutil.copy(it["path"], folder / f"{it['speaker']}_{Path(it['path']).name}")
    return folder


def _image_inputs(cfg: DictConfig, folder: Path) -> Path:
    """A folder of five PNG files drawn by the built-in shapes generator."""
    from PIL import Image

    from seqattn.modalities.image.shapes import generate_shapes

    folder.mkdir(parents=True, exist_ok=True)
    images, _ = generate_shapes(5, image_size=16, seed=123, split="test", classes=tuple(cfg.data.shapes.classes))
    for i, image in enumerate(images):
        array = (image.transpose(1, 2, 0) * 255).round().astype("uint8")
        Image.fromarray(array).save(folder / f"shape_{i}.png")
    return folder


def _molecule_inputs(cfg: DictConfig, folder: Path) -> Path:
    """A SMILES CSV of six molecules (no targets)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "molecules.csv"
    path.write_text("smiles\nCCO\nc1ccccc1O\nCC(=O)Nc1ccc(O)cc1\nC\nN#Cc1ccccc1\nOC(=O)c1ccccc1C(=O)O\n")
    return path


def _text_inputs(cfg: DictConfig, folder: Path) -> Path:
    """Plain text, one sentence per line (the tagging and classification predict format)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sentences.txt"
    path.write_text("they can fish , paint , smoke and milk .\nI saw a saw near the old boat .\n"
                    "the film was not bad\ngood but boring\nwe sell water .\n")
    return path


def _social_inputs(cfg: DictConfig, folder: Path) -> Path:
    """The built-in karate club's node CSV (predict reads the edges from the run's data config)."""
    from hydra.utils import instantiate

    nodes, _ = instantiate(cfg.data).graph_files()
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(nodes, folder / "nodes.csv"))


@dataclass(frozen=True)
class Task:
    overrides: list[str]  # a tiny run of this task (seconds on 2 CPU cores)
    predict_inputs: Callable[[DictConfig, Path], Path]  # (run config, empty folder) -> predict input
    exportable: bool = True  # seqattn.export supports its adapter (graph adapters are refused)
    resume_overrides: tuple[str, ...] = ()  # for the kill-and-resume test (after its own overrides)
    exact_resume: bool = True  # a killed and resumed run ends with bit-identical weights


TASKS: dict[str, Task] = {
    "speech": Task(
        overrides=["task=speech", "data.synth.n_train_speakers=3", "data.synth.n_val_speakers=1",
                   "data.synth.n_test_speakers=1", "data.synth.utts_per_speaker={train:14,val:8,test:10}",
                   "data.batch_size=8", "model.dim=48", "model.depth=2", "trainer.max_epochs=6"],
        predict_inputs=_speech_inputs,
    ),
    "speech_cls": Task(
        overrides=["task=speech_cls", "data.synth.words=[kasu,tami,puni,shafi]", "data.synth.n_train_speakers=4",
                   "data.synth.n_val_speakers=1", "data.synth.n_test_speakers=1",
                   "data.synth.clips_per_word={train:4,val:2,test:3}", "data.batch_size=16", "model.dim=32",
                   "model.depth=2", "model.heads=2", "trainer.max_epochs=6"],
        predict_inputs=_clip_inputs,
    ),
    "text_tagging": Task(
        overrides=["task=text_tagging", "data.synth.n_train=400", "data.synth.n_val=50", "data.synth.n_test=60",
                   "data.batch_size=32", "model.dim=32", "model.depth=2", "model.heads=2", "trainer.max_epochs=3"],
        predict_inputs=_text_inputs,
    ),
    "text_cls": Task(
        overrides=["task=text_cls", "data.synth.n_train=400", "data.synth.n_val=50", "data.synth.n_test=60",
                   "data.batch_size=32", "model.dim=32", "model.depth=2", "model.heads=2", "trainer.max_epochs=3"],
        predict_inputs=_text_inputs,
    ),
    "image": Task(
        overrides=["task=image", "data.shapes.classes=[triangle,ring]", "data.shapes.n_train=800",
                   "data.shapes.n_val=64", "data.shapes.n_test=64", "data.batch_size=32", "adapter.mode=patches",
                   "adapter.patch_size=2", "model.dim=32", "model.depth=2", "model.heads=2", "trainer.max_epochs=4",
                   "data.augment.shift=0.125"],  # as for real images: exact resume must hold with random shifts
        predict_inputs=_image_inputs,
    ),
    "molecule": Task(
        overrides=["task=molecule", "data.limit=400", "data.batch_size=32", "adapter.positional=random_walk",
                   "model.dim=32", "model.depth=2", "trainer.max_epochs=4"],
        predict_inputs=_molecule_inputs,
        exportable=False,
    ),
    "social": Task(
        overrides=["task=social", "model.dim=32", "model.depth=2", "trainer.max_epochs=20"],
        predict_inputs=_social_inputs,
        exportable=False,
        resume_overrides=("trainer.max_epochs=12",),  # one full-graph step per epoch: kill between epochs
        # known gap: resumed karate runs end with different weights (randomness not yet captured; see
        # tasks/social/README.md); resuming itself works
        exact_resume=False,
    ),
    "speech_ctc": Task(  # rows are decoded sequences; export outputs per-frame logits (decoding stays in Python)
        overrides=["task=speech_ctc", "data.synth.n_train_speakers=3", "data.synth.n_val_speakers=1",
                   "data.synth.n_test_speakers=1", "data.synth.utts_per_speaker={train:14,val:8,test:10}",
                   "data.batch_size=8", "model.dim=48", "model.depth=2", "trainer.max_epochs=6"],
        predict_inputs=_speech_inputs,
    ),
}
WORKFLOW_TASKS = list(TASKS)
EXPORT_TASKS = [name for name, task in TASKS.items() if task.exportable]
EXACT_RESUME_TASKS = [name for name, task in TASKS.items() if task.exact_resume]


def compose(overrides: list[str], output_dir: Path, data_dir: Path) -> DictConfig:
    """The config ``python -m seqattn.run <overrides>`` would build, writing into ``output_dir``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from seqattn.run import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        cfg.paths.data_dir = str(data_dir)
        del cfg.hydra
    return cfg


@dataclass
class TinyRun:
    task: str
    cfg: DictConfig
    metrics: dict[str, Any]
    output_dir: Path

    @property
    def best(self) -> Path:
        return self.output_dir / "checkpoints" / "best.ckpt"


@pytest.fixture(scope="session")
def workflow_data_dir(tmp_path_factory) -> Path:
    """One data dir for the session: built-in corpora are generated once."""
    return tmp_path_factory.mktemp("workflow_data")


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, workflow_data_dir) -> Callable[[str], TinyRun]:
    """``tiny_run(task)`` -> a trained tiny run of ``task`` (trained once per session)."""
    from seqattn.run import train

    cache: dict[str, TinyRun] = {}

    def get(task: str) -> TinyRun:
        if task not in cache:
            out = tmp_path_factory.mktemp(f"tiny_{task}")
            cfg = compose(TASKS[task].overrides + QUIET, out, workflow_data_dir)
            metrics = train(cfg)
            assert json.loads((out / "metrics.json").read_text())["task"] == task
            cache[task] = TinyRun(task, cfg, metrics, out)
        return cache[task]

    return get


def assert_rows_close(got: Any, want: Any, atol: float = 1e-4, where: str = "rows") -> None:
    """Rows equal: same keys, strings and ints equal, floats within ``atol`` (recursively)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (where, sorted(got), sorted(want))
        for k in want:
            assert_rows_close(got[k], want[k], atol, f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_rows_close(g, w, atol, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=atol), (where, got, want)
    else:
        assert got == want, (where, got, want)


def macro_f1_from_confusion(matrix) -> float:
    """Macro-F1 computed by hand from a confusion matrix (rows true, columns predicted): the mean over
    classes that occur (as truth or prediction) of 2·TP / (2·TP + FP + FN) -- torchmetrics' definition."""
    import torch

    m = torch.as_tensor(matrix, dtype=torch.float64)
    tp = m.diagonal()
    fp, fn = m.sum(0) - tp, m.sum(1) - tp
    present = (tp + fp + fn) > 0
    f1 = 2 * tp / (2 * tp + fp + fn).clamp_min(1e-12)
    return float(f1[present].mean())


def accuracy_from_confusion(matrix) -> float:
    import torch

    m = torch.as_tensor(matrix, dtype=torch.float64)
    return float(m.diagonal().sum() / m.sum())
