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


def test_an_adapter_fed_other_inputs_than_the_checkpoints_is_a_warning_naming_both_values(tiny_run, tmp_path,
                                                                                         workflow_data_dir, caplog):
    """speech_pretrain (mel band to Nyquist) -> speech_cls (0-4 kHz) loaded silently before: a setting that
    changes what the adapter gives the loaded layers is named with both values; dropout and the class are not."""
    import logging

    from seqattn.training.finetune import input_differences

    assert input_differences({"f_max": 4000, "dropout": 0.3, "n_mels": 40, "_target_": "A", "crop": 1.0,
                              "node_target": "features"},
                             {"f_max": None, "dropout": 0.1, "n_mels": 40, "_target_": "B", "node_target": "present"}) == [
        "f_max=4000 (checkpoint: None)"]  # what a pretraining predicts (node_target) is no input either
    assert input_differences(None, {"f_max": None}) == [] and input_differences({"f_max": 1}, None) == []
    base = tiny_run("speech_cls")
    model = _objective(compose(TASKS["speech_cls"].overrides + QUIET, tmp_path / "run", workflow_data_dir))
    config = read_checkpoint(base.best)["seqattn_config"]["adapter"]
    with caplog.at_level(logging.WARNING, logger="seqattn.training.finetune"):
        init_from_checkpoint(model, base.best, resize_positional_table=False, adapter=dict(config))
        assert not [r for r in caplog.records if "differs from the checkpoint" in r.getMessage()]
        init_from_checkpoint(model, base.best, resize_positional_table=False,
                             adapter=dict(config, f_max=1234, dropout=0.9))
    warned = [r.getMessage() for r in caplog.records if "differs from the checkpoint" in r.getMessage()]
    assert len(warned) == 1 and f"f_max=1234 (checkpoint: {config['f_max']!r})" in warned[0]
    assert "dropout" not in warned[0]


def test_a_feature_width_set_otherwise_than_the_checkpoints_is_named_in_the_shape_error(tiny_run, tmp_path,
                                                                                        workflow_data_dir):
    """adapter.n_mels set otherwise changes the adapter's input width: the error lists the tensors and names the
    setting with both values, not only the shapes."""
    base = tiny_run("speech_cls")
    config = read_checkpoint(base.best)["seqattn_config"]["adapter"]
    n_mels = int(config["n_mels"]) + 8
    model = _objective(compose(TASKS["speech_cls"].overrides + QUIET + [f"adapter.n_mels={n_mels}"], tmp_path / "run",
                               workflow_data_dir))
    with pytest.raises(ValueError, match="does not fit") as err:
        init_from_checkpoint(model, base.best, resize_positional_table=False, adapter=dict(config, n_mels=n_mels))
    assert f"n_mels={n_mels} (checkpoint: {config['n_mels']!r})" in str(err.value) and "adapter.KEY=VALUE" in str(err.value)
    with pytest.raises(ValueError, match="does not fit") as err:  # without this run's adapter config: the shapes only
        init_from_checkpoint(model, base.best, resize_positional_table=False)
    assert "n_mels" not in str(err.value)


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


# ---------------------------------------------------------------------------------------------
# text: vocabulary tables are mapped by token, never by position

def _text_objective(tmp_path: Path, name: str, lines: list[str], data_dir: Path, *extra: str):
    """A text_cls objective (not trained) whose vocabulary is built from ``lines`` (``text,label``)."""
    path, held_out = tmp_path / f"{name}.csv", tmp_path / "held_out.csv"
    path.write_text("text,label\n" + "".join(f"{line}\n" for line in lines))
    held_out.write_text("text,label\ngood film,pos\nbad film,neg\n")
    overrides = [*TASKS["text_cls"].overrides, *QUIET, f"data.train_path={path}", f"data.val_path={held_out}",
                 f"data.test_path={held_out}", "adapter.char_dim=8", *extra]
    return _objective(compose(overrides, tmp_path / name, data_dir))


def _row(model, name: str, token: str):
    """``name``'s row of ``token`` (word table or character table of the text adapter)."""
    adapter = model.net.adapter
    tokens = adapter.vocab.words if name == "table" else adapter.chars.chars
    table = adapter.table.weight if name == "table" else adapter.chars.embedding.weight
    return table[tokens.index(token)].detach()


# same number of words and of characters in both files, but other words, other counts and other characters
_OLD = ["good film,pos", "bad film,neg", "good plot,pos", "bad plot,neg"] * 2 + ["good acting,pos", "dully acting,neg"]
_NEW = ["bad film,neg", "bad plot,neg", "nice film,pos", "bad acting,neg"] * 2 + ["bad movie,neg"]


def test_text_rows_are_mapped_by_word_and_by_character_not_by_position(tmp_path, workflow_data_dir, caplog):
    """Vocabularies of the same size (the case a tensor-shape check loads silently) with other words, in
    another frequency order: a shared word's row is the checkpoint's row of that word; so for characters."""
    import logging

    old = _text_objective(tmp_path, "old", _OLD, workflow_data_dir)
    new = _text_objective(tmp_path, "new", _NEW, workflow_data_dir)
    old_words, new_words = old.net.adapter.vocab.words, new.net.adapter.vocab.words
    old_chars, new_chars = old.net.adapter.chars.chars, new.net.adapter.chars.chars
    assert len(old_words) == len(new_words) and old_words != new_words
    assert len(old_chars) == len(new_chars) and old_chars != new_chars
    moved = [w for w in new_words if w in old_words and new_words.index(w) != old_words.index(w)]
    assert moved, (old_words, new_words)  # shared words at other positions: a positional copy would differ
    fresh = {w: _row(new, "table", w).clone() for w in new_words}
    fresh_chars = {c: _row(new, "chars", c).clone() for c in new_chars}
    with caplog.at_level(logging.INFO, logger="seqattn.training.finetune"):
        report = init_from_state(new, old.state_dict(), old.labels, True, source_spec=old.spec.to_dict())
    for word in new_words:
        want = _row(old, "table", word) if word in old_words else fresh[word]  # a new word keeps its start
        torch.testing.assert_close(_row(new, "table", word), want, rtol=0, atol=0, msg=word)
    for char in new_chars:
        want = _row(old, "chars", char) if char in old_chars else fresh_chars[char]
        torch.testing.assert_close(_row(new, "chars", char), want, rtol=0, atol=0, msg=char)
    shared = len(set(new_words) & set(old_words))
    assert report["vocab"]["net.adapter.table.weight"] == {
        "from_checkpoint": shared, "total": len(new_words), "new": len(new_words) - shared,
        "unused": len(old_words) - shared}
    assert (f"embedding: {shared} of {len(new_words)} words from the checkpoint, {len(new_words) - shared} new "
            f"(initialised), {len(old_words) - shared} checkpoint words unused") in caplog.text
    chars_shared = len(set(new_chars) & set(old_chars))
    assert (f"character embedding: {chars_shared} of {len(new_chars)} characters from the checkpoint, "
            f"{len(new_chars) - chars_shared} new (initialised), {len(old_chars) - chars_shared} checkpoint "
            "characters unused") in caplog.text


def test_finetune_onto_text_with_new_words_loads_the_checkpoint_rows_and_counts_the_new(tiny_run, tmp_path,
                                                                                       workflow_data_dir, caplog):
    """`task=text_cls data.train_path=<other.csv> init_from=<best.ckpt>` with words the checkpoint never saw:
    it loads (no shape error), the checkpoint's words keep their rows, the new ones are counted in the log."""
    import logging

    base = tiny_run("text_cls")
    checkpoint = read_checkpoint(base.best)
    old_words = list(checkpoint["hyper_parameters"]["spec"]["vocab"])  # the checkpoint carries its vocabulary
    known = [w for w in old_words[2:] if w.isalpha()][:6]
    lines = [f"{w} {known[(i + 1) % 6]} zyzzyva,{'pos' if i % 2 else 'neg'}" for i, w in enumerate(known)] * 2
    model = _text_objective(tmp_path, "other", lines, workflow_data_dir, "adapter.char_dim=0")
    words = model.net.adapter.vocab.words
    assert len(words) == len(known) + 3 and "zyzzyva" in words  # <pad>, <unk>, the known words, one new
    start = _row(model, "table", "zyzzyva").clone()
    with caplog.at_level(logging.INFO, logger="seqattn.training.finetune"):
        report = init_from_checkpoint(model, base.best, resize_positional_table=True)
    for word in words:
        want = start if word == "zyzzyva" else checkpoint["state_dict"]["net.adapter.table.weight"][old_words.index(word)]
        torch.testing.assert_close(_row(model, "table", word), want, rtol=0, atol=0, msg=word)
    assert "net.adapter.table.weight" in report["loaded"]
    assert (f"embedding: {len(words) - 1} of {len(words)} words from the checkpoint, 1 new (initialised), "
            f"{len(old_words) - len(words) + 1} checkpoint words unused; new e.g. ['zyzzyva']") in caplog.text


def test_map_by_token_along_columns_copies_the_other_columns_by_position():
    """One-hot words: the projection's columns [D, V + K] are words, then K character features."""
    from seqattn.model.protocols import VocabTable
    from seqattn.training.finetune import map_by_token

    source = torch.arange(2 * 5.0).reshape(2, 5)  # words a, b, c (columns 0-2), features (3-4)
    fresh = -torch.ones(2, 5)  # words c, d, a, then the features
    out, counts = map_by_token("proj.weight", VocabTable("vocab", ("c", "d", "a"), axis=1), fresh, source,
                               ["a", "b", "c"])
    torch.testing.assert_close(out, torch.stack([source[:, 2], fresh[:, 1], source[:, 0], source[:, 3],
                                                 source[:, 4]], dim=1))
    assert counts == {"from_checkpoint": 2, "total": 3, "new": 1, "unused": 1, "new_tokens": ["d"]}


def test_a_text_table_of_another_width_is_an_error_naming_both_shapes_and_the_option(tmp_path, workflow_data_dir):
    old = _text_objective(tmp_path, "old", _OLD, workflow_data_dir)
    wider = _text_objective(tmp_path, "wide", _OLD, workflow_data_dir, "adapter.embedding_dim=48")
    with pytest.raises(ValueError, match="does not fit") as err:
        init_from_state(wider, old.state_dict(), old.labels, True, source_spec=old.spec.to_dict())
    v = len(old.net.adapter.vocab)
    assert (f"net.adapter.table.weight: checkpoint ({v}, 32) vs model ({v}, 48): the embedding width differs; set "
            "adapter.embedding_dim (default model.dim") in str(err.value)
    with pytest.raises(ValueError, match=r"lists no words \(hyper_parameters.spec.vocab\)"):
        init_from_state(wider, old.state_dict(), old.labels, True, source_spec={})


def test_a_checkpoint_without_the_conv_stem_names_the_stem_and_the_model_without_it(tmp_path, workflow_data_dir):
    """speech_cls's default model=stem_transformer has net.subsample tensors a masked-frame pretrained (or
    model=transformer) checkpoint lacks: the error lists them and names model=transformer; with it, it loads."""
    overrides = TASKS["speech_cls"].overrides + QUIET
    bare = _objective(compose(overrides + ["model=transformer"], tmp_path / "bare", workflow_data_dir))
    stem = _objective(compose(overrides, tmp_path / "stem", workflow_data_dir))
    with pytest.raises(ValueError, match=r"net\.subsample\.cnn\..*not in the checkpoint(.|\n)*model=transformer"):
        init_from_state(stem, bare.state_dict(), bare.labels, resize_positional_table=True)
    again = _objective(compose(overrides + ["model=transformer"], tmp_path / "again", workflow_data_dir))
    report = init_from_state(again, bare.state_dict(), bare.labels, resize_positional_table=True)
    assert report["loaded"] and not any("subsample" in n for n in report["loaded"])


def test_a_stem_checkpoint_with_a_token_per_frame_names_the_time_factor(tmp_path, workflow_data_dir):
    """A speech_cls checkpoint whose stem kept a token per frame (time_factor=1, the default before 2026-12-04)
    lacks the frame-stacking tensors of today's default: the error names net.subsample.time_factor, not a model
    without a stem; with the option it loads, stem included."""
    overrides = TASKS["speech_cls"].overrides + QUIET
    per_frame = _objective(compose(overrides + ["net.subsample.time_factor=1"], tmp_path / "old", workflow_data_dir))
    pairs = _objective(compose(overrides, tmp_path / "new", workflow_data_dir))
    with pytest.raises(ValueError, match=r"net\.subsample\.time\..*not in the checkpoint(.|\n)*time_factor=1") as err:
        init_from_state(pairs, per_frame.state_dict(), per_frame.labels, resize_positional_table=True)
    assert "model=transformer" not in str(err.value)
    again = _objective(compose(overrides + ["net.subsample.time_factor=1"], tmp_path / "again", workflow_data_dir))
    report = init_from_state(again, per_frame.state_dict(), per_frame.labels, resize_positional_table=True)
    assert any(n.startswith("net.subsample.cnn.") for n in report["loaded"])


def test_the_crfs_tag_pair_scores_load_with_the_head_and_only_then(tmp_path, workflow_data_dir, caplog):
    """objective.crf=true keeps its scores outside net.* (model.crf): a fine-tune onto the same tags starts from
    them (they were dropped before); a CRF-less checkpoint leaves them fresh; a run without a CRF names the unused
    ones in the log."""
    import logging

    overrides = TASKS["text_tagging"].overrides + QUIET
    source = _objective(compose(overrides + ["objective.crf=true"], tmp_path / "a", workflow_data_dir))
    with torch.no_grad():
        for p in source.crf.parameters():
            p.copy_(torch.randn_like(p))
    state, labels, spec = source.state_dict(), list(source.labels), source.hparams["spec"]

    target = _objective(compose(overrides + ["objective.crf=true"], tmp_path / "b", workflow_data_dir))
    report = init_from_state(target, state, labels, resize_positional_table=False, source_spec=spec)
    for name in ("crf.transitions", "crf.start", "crf.end"):
        assert name in report["loaded"]
        torch.testing.assert_close(target.state_dict()[name], state[name], rtol=0, atol=0)

    other = _objective(compose(overrides + ["objective.crf=true"], tmp_path / "c", workflow_data_dir))
    report = init_from_state(other, state, labels[::-1], resize_positional_table=False,
                            source_spec=spec)  # another label order
    assert {"crf.transitions", "crf.start", "crf.end"} <= set(report["new"])
    assert all(float(p.abs().sum()) == 0 for p in other.crf.parameters())  # fresh: zero (= cross-entropy)

    no_crf_state = {k: v for k, v in state.items() if not k.startswith("crf.")}
    fresh = _objective(compose(overrides + ["objective.crf=true"], tmp_path / "d", workflow_data_dir))
    report = init_from_state(fresh, no_crf_state, labels, resize_positional_table=False, source_spec=spec)
    assert {"crf.transitions", "crf.start", "crf.end"} <= set(report["new"])

    plain = _objective(compose(overrides, tmp_path / "e", workflow_data_dir))
    with caplog.at_level(logging.INFO, logger="seqattn.training.finetune"):
        report = init_from_state(plain, state, labels, resize_positional_table=False, source_spec=spec)
    assert not [n for n in report["loaded"] + report["new"] if n.startswith("crf.")]
    assert [r for r in caplog.records if "crf.transitions" in r.getMessage() and "not used" in r.getMessage()]
