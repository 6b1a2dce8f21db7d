"""The text tasks' workflow declarations (see :mod:`tests.workflow_task`)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from tests.workflow_task import FileSource, Task

_TINY = ["data.synth.n_train=400", "data.synth.n_val=50", "data.synth.n_test=60", "data.batch_size=32",
         "model.dim=32", "model.depth=2", "model.heads=2", "trainer.max_epochs=3"]


def _text_inputs(cfg: DictConfig, folder: Path) -> Path:
    """Plain text, one sentence per line (the tagging and classification predict format)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sentences.txt"
    path.write_text("they can fish , paint , smoke and milk .\nI saw a saw near the old boat .\n"
                    "the film was not bad\ngood but boring\nwe sell water .\n")
    return path


def _review_files(tmp_path: Path) -> FileSource:
    (tmp_path / "reviews.csv").write_text("text,label\n" + "".join(f"film {i} good,pos\nfilm {i} bad,neg\n"
                                                                   for i in range(10)))
    return [f"data.train_path={tmp_path / 'reviews.csv'}"], "files", "synthetic"


def _conllu_files(tmp_path: Path) -> FileSource:
    (tmp_path / "t.conllu").write_text("".join(f"1\tI\tI\tPRON\t_\t_\t0\t_\t_\t_\n2\tsaw{i}\tsee\tVERB\t_\t_\t0\t_\t_\t_\n\n"
                                               for i in range(10)))
    return [f"data.train_path={tmp_path / 't.conllu'}"], "files", "synthetic"


def _sentence_files(tmp_path: Path) -> FileSource:
    (tmp_path / "sentences.txt").write_text("".join(f"I saw {i} boats near the old mill .\n" for i in range(10)))
    return [f"data.train_path={tmp_path / 'sentences.txt'}"], "files", "synthetic"


TASKS = {
    "text_tagging": Task(overrides=["task=text_tagging", *_TINY], predict_inputs=_text_inputs,
                         file_source=_conllu_files),
    "text_pretrain": Task(overrides=["task=text_pretrain", *_TINY], predict_inputs=_text_inputs,
                          file_source=_sentence_files, predicts=False),
    "text_cls": Task(overrides=["task=text_cls", *_TINY], predict_inputs=_text_inputs, file_source=_review_files),
}
