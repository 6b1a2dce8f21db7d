"""Fine-tuning: `python -m seqattn.run task=... init_from=PATH.ckpt [freeze=[adapter,encoder]]`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from seqattn.training.checkpoint import read_checkpoint
from seqattn.training.finetune import init_from_checkpoint, init_from_state, resize_positional
from seqattn.run import build_objective, train
from tests.workflows import QUIET, TASKS, WORKFLOW_TASKS, compose, tiny_run, workflow_data_dir  # noqa: F401

BROAD = {"sil": "sil", "a": "vowel", "i": "vowel", "u": "vowel", "m": "nasal", "n": "nasal",
         "s": "fricative", "sh": "fricative", "f": "fricative", "p": "stop", "t": "stop", "k": "stop"}


def _objective(cfg):
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return build_objective(cfg, datamodule)


def _net(state):
    return {k: v for k, v in state.items() if k.startswith("net.")}


def _broad_class_manifest(cfg, path: Path) -> Path:
    """The tiny built-in corpus relabelled with 5 broad phone classes (a label set the model never saw)."""
    from seqattn.modalities.audio.corpus import generate_speech_corpus

    corpus = generate_speech_corpus(cfg.data.data_dir, **cfg.data.synth)
    lines = []
    for line in corpus.read_text().splitlines():
        item = json.loads(line)
        item["path"] = str(corpus.parent / item["path"])
        item["segments"] = [[s, e, BROAD[label]] for s, e, label in item["segments"]]
        lines.append(json.dumps(item))
    path.write_text("\n".join(lines) + "\n")
    return path


def _accuracy(model, datamodule) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in datamodule.test_dataloader():
            pred, target = model.predictions(model(batch), batch)
            keep = target >= 0
            correct += int((pred[keep] == target[keep]).sum())
            total += int(keep.sum())
    return correct / total


def test_finetune_onto_another_label_set_loads_trains_and_improves(tiny_run, tmp_path, workflow_data_dir):
    """A 12-phone checkpoint fine-tuned onto 5 broad phone classes (a label set it never saw): the
    adapter and encoder load, the head is new, and training improves test accuracy from the start
    point (new head: chance level) to well above the majority class."""
    from seqattn.run import finetune_options
    from seqattn.training.finetune import apply_finetune

    base = tiny_run("speech")
    manifest = _broad_class_manifest(base.cfg, tmp_path / "broad.jsonl")
    cfg = compose(TASKS["speech"].overrides + QUIET + [
        "data.source=manifest", f"data.manifest={manifest}", "trainer.max_epochs=4",
        f"init_from={base.best}", "finetune.pretrained_lr_mult=0.5"], tmp_path / "finetuned", workflow_data_dir)

    start = _objective(cfg)
    apply_finetune(start, finetune_options(cfg))
    datamodule = instantiate(cfg.data)
    datamodule.setup("test")
    before = _accuracy(start, datamodule)
    finetuned = train(cfg)

    report = finetuned["finetune"]
    assert report["new"] and all(n.startswith("net.head.") for n in report["new"])
    pretrained = _net(read_checkpoint(base.best)["state_dict"])
    assert report["loaded"] == len(pretrained) - len(report["new"])
    assert finetuned["labels"] == sorted(set(BROAD.values()))
    counts = torch.tensor(finetuned["confusion_matrix"]).sum(1)
    majority = float(counts.max() / counts.sum())
    print(f"fine-tuned {finetuned['test/acc']:.4f}, at the start {before:.4f}, majority {majority:.4f}")
    assert finetuned["test/acc"] > max(before, majority) + 0.2


def test_freeze_keeps_the_pretrained_parts_and_trains_the_head(tiny_run, tmp_path, workflow_data_dir):
    base = tiny_run("speech")
    manifest = _broad_class_manifest(base.cfg, tmp_path / "broad.jsonl")
    cfg = compose(TASKS["speech"].overrides + QUIET + [
        "data.source=manifest", f"data.manifest={manifest}", "trainer.max_epochs=1", "test=false",
        f"init_from={base.best}", "freeze=[adapter,encoder]"], tmp_path / "frozen", workflow_data_dir)
    metrics = train(cfg)
    assert metrics["finetune"]["frozen"] > 0
    before = read_checkpoint(base.best)["state_dict"]
    after = read_checkpoint(Path(metrics["output_dir"]) / "checkpoints" / "last.ckpt")["state_dict"]
    for name, value in _net(after).items():
        if name.startswith(("net.adapter.", "net.encoder.")):
            torch.testing.assert_close(value, before[name], rtol=0, atol=0, msg=name)
    head = {k: v for k, v in after.items() if k.startswith("net.head.") and v.dim() == 2}
    assert head and all(v.shape[0] == 5 for v in head.values())  # the new label set's head


@pytest.mark.parametrize("task", WORKFLOW_TASKS)
def test_same_label_set_loads_every_tensor_including_the_head(task, tiny_run, tmp_path, workflow_data_dir):
    base = tiny_run(task)
    model = _objective(compose(TASKS[task].overrides + QUIET, tmp_path / "run", workflow_data_dir))
    report = init_from_checkpoint(model, base.best, resize_positional_table=True)
    assert report["new"] == [] and report["resized"] == []
    pretrained = read_checkpoint(base.best)["state_dict"]
    for name, value in _net(model.state_dict()).items():
        torch.testing.assert_close(value, pretrained[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("task", WORKFLOW_TASKS)
def test_another_encoder_shape_is_an_error_listing_the_tensors(task, tiny_run, tmp_path, workflow_data_dir):
    base = tiny_run(task)
    depth = int(base.cfg.model.depth)
    model = _objective(compose(TASKS[task].overrides + QUIET + ["model.ff_mult=3", f"model.depth={depth + 1}"],
                               tmp_path / "run", workflow_data_dir))
    with pytest.raises(ValueError, match="does not fit") as err:
        init_from_checkpoint(model, base.best, resize_positional_table=True)
    text = str(err.value)
    assert "net.encoder.layers.0.ff" in text and "checkpoint (" in text
    assert f"net.encoder.layers.{depth}." in text and "not in the checkpoint" in text
    assert "net.head" not in text


def test_learned_positional_table_is_interpolated_to_a_new_max_len(tmp_path, workflow_data_dir):
    overrides = TASKS["speech"].overrides + QUIET + ["model.positional=learned"]
    old = _objective(compose(overrides + ["model.max_len=300"], tmp_path / "a", workflow_data_dir))
    new = _objective(compose(overrides + ["model.max_len=450"], tmp_path / "b", workflow_data_dir))
    state = old.state_dict()
    report = init_from_state(new, state, old.labels, resize_positional_table=True)
    assert report["resized"] == ["net.encoder.positional.weight"]
    table = new.net.encoder.positional.weight.detach()
    torch.testing.assert_close(table[0], state["net.encoder.positional.weight"][0])
    torch.testing.assert_close(table[-1], state["net.encoder.positional.weight"][-1])
    with pytest.raises(ValueError, match=r"positional.weight: checkpoint \(300, 48\) vs model \(450, 48\)"):
        init_from_state(new, state, old.labels, resize_positional_table=False)


def test_resize_positional_is_linear_interpolation():
    table = torch.arange(3.0)[:, None].repeat(1, 4)  # [3, 4]: rows 0, 1, 2
    out = resize_positional(table, 5)
    torch.testing.assert_close(out[:, 0], torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0]))
    torch.testing.assert_close(resize_positional(table, 3), table)


def test_pretrained_lr_mult_makes_parameter_groups_and_freeze_drops_parameters(tmp_path, workflow_data_dir):
    from seqattn.training.finetune import freeze

    model = _objective(compose(TASKS["speech"].overrides + QUIET, tmp_path / "run", workflow_data_dir))
    lr = model.optimizer_cfg["lr"]
    model.lr_multipliers = {n: 0.1 for n, _ in model.named_parameters() if n.startswith("net.encoder.")}
    groups = model.parameter_groups()  # (lr, decay) groups: full lr first, decayed weights first
    assert [g["lr"] for g in groups] == [pytest.approx(lr)] * 2 + [pytest.approx(0.1 * lr)] * 2
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    assert sum(len(g["params"]) for g in groups if g["lr"] < lr) == len(model.lr_multipliers)
    frozen = freeze(model, ["encoder"])
    assert sorted(frozen) == sorted(model.lr_multipliers)
    assert [g["lr"] for g in model.parameter_groups()] == [pytest.approx(lr)] * 2  # only the lr-1 groups are left
    with pytest.raises(ValueError, match=r"\['decoder'\] not among"):
        freeze(model, ["decoder"])
    freeze(model, ["adapter", "head"])
    with pytest.raises(ValueError, match="everything is frozen"):
        model.parameter_groups()
