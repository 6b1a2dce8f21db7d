"""The audio tasks' workflow declarations (see :mod:`tests.workflow_task`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from tests.workflow_task import FileSource, Task

_SPEECH_SYNTH = ["data.synth.n_train_speakers=3", "data.synth.n_val_speakers=1", "data.synth.n_test_speakers=1",
                 "data.synth.utts_per_speaker={train:14,val:8,test:10}", "data.batch_size=8", "model.dim=48",
                 "model.depth=2", "trainer.max_epochs=6"]


def _speech_inputs(cfg: DictConfig, folder: Path) -> Path:
    """A folder of five test-split WAV files of the built-in corpus (different lengths)."""
    from seqattn.modalities.audio.corpus import generate_speech_corpus
    from seqattn.modalities.audio.manifest import read_manifest

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


def _speech_files(tmp_path: Path) -> FileSource:
    """One WAV file with segment labels in a JSONL manifest, in every split."""
    import soundfile as sf

    sf.write(tmp_path / "a.wav", np.random.default_rng(0).normal(size=8000).astype(np.float32) * 0.1, 16000)
    (tmp_path / "m.jsonl").write_text("".join(json.dumps({"path": "a.wav", "segments": [[0, 0.2, "x"], [0.2, 0.5, "y"]],
                                                           "split": s}) + "\n" for s in ("train", "val", "test")))
    return [f"data.manifest={tmp_path / 'm.jsonl'}"], "manifest", "synthetic"


def _clip_folder(tmp_path: Path) -> FileSource:
    """A folder of unlabelled WAV clips (one in a sub-folder), for pretraining."""
    import soundfile as sf

    (tmp_path / "clips" / "more").mkdir(parents=True)
    for i in range(10):
        where = tmp_path / "clips" / ("more" if i == 9 else "") / f"c{i}.wav"
        sf.write(where, np.random.default_rng(i).normal(size=4000 + 400 * i).astype(np.float32) * 0.1, 16000)
    return [f"data.manifest={tmp_path / 'clips'}", "data.val_fraction=0.2", "data.test_fraction=0.2"], "manifest", \
        "synthetic"


_CLIP_SYNTH = ["data.synth.words=[kasu,tami,puni,shafi]", "data.synth.n_train_speakers=4", "data.synth.n_val_speakers=1",
               "data.synth.n_test_speakers=2", "data.synth.clips_per_word={train:4,val:2,test:3}", "data.batch_size=16",
               "model.dim=32", "model.depth=2", "model.heads=2"]

TASKS = {
    "speech": Task(overrides=["task=speech", *_SPEECH_SYNTH], predict_inputs=_speech_inputs, file_source=_speech_files),
    "speech_cls": Task(
        # 12 epochs: the default conv stem (model=stem_transformer) starts slower on this tiny corpus (seed 0 test
        # acc 0.333 at 6 epochs, 0.917 at 10; model=transformer: 0.708 at 6); with 64 log-mel bins (the default since
        # 2026-12-05) 0.500 at 10 epochs, 0.833 at 12 (40 bins on the code of that day: 0.708 at 10)
        overrides=["task=speech_cls", *_CLIP_SYNTH, "trainer.max_epochs=12"],
        predict_inputs=_clip_inputs,
        file_source=None,
    ),
    # masked-frame pretraining: no head to predict with (load / export refuse its checkpoint)
    "speech_pretrain": Task(overrides=["task=speech_pretrain", *_CLIP_SYNTH, "trainer.max_epochs=4"],
                            predict_inputs=_clip_inputs, file_source=_clip_folder, predicts=False),
    # rows are decoded sequences; export outputs per-frame logits (decoding stays in Python)
    "speech_ctc": Task(overrides=["task=speech_ctc", *_SPEECH_SYNTH], predict_inputs=_speech_inputs, file_source=None),
}
