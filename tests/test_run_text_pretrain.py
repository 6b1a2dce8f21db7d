"""End to end: `task=text_pretrain` learns to predict hidden words on unlabelled sentences, its checkpoint
refuses to predict, and `task=text_tagging init_from=<it>` starts from its adapter and encoder."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

import seqattn
from seqattn.modalities.text.vocab import UNK_INDEX
from seqattn.run import build_objective, finetune_options, train
from seqattn.training.checkpoint import read_checkpoint
from seqattn.training.finetune import apply_finetune, use_checkpoint_vocabulary
from tests.pretrain_checks import assert_starts_from_pretraining

QUIET = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "callbacks.early_stopping=null",
         "plot=false"]
SMALL = ["data.synth.n_train=400", "data.synth.n_val=60", "data.synth.n_test=60", "data.batch_size=32",
         "model.dim=32", "model.depth=2", "model.heads=2", *QUIET]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    from tests.workflows import compose

    out = tmp_path_factory.mktemp("pretrain")
    cfg = compose(["task=text_pretrain", *SMALL, "trainer.max_epochs=6", "objective.mask_ratio=0.3",
                   "objective.optimizer.lr=5e-3"], out / "run", out / "data")
    return train(cfg), out


def _objective(cfg):
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return build_objective(cfg, datamodule)


@pytest.mark.slow
def test_pretraining_lowers_the_hidden_words_loss_and_keeps_what_fine_tuning_needs(pretrained):
    metrics, _ = pretrained
    with open(Path(metrics["output_dir"]) / "csv" / "metrics.csv", newline="") as f:
        val = [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]
    assert len(val) >= 6 and val[-1] < val[0] - 0.2 and val[-1] < min(val[:3]), val  # the hidden words' loss falls
    assert 0.0 < metrics["test/acc"] <= 1.0 and "test/loss" in metrics
    checkpoint = read_checkpoint(metrics["best_checkpoint"])
    spec = checkpoint["hyper_parameters"]["spec"]
    assert spec["vocab"][:2] == ["<pad>", "<unk>"] and len(spec["vocab"]) > 50 and spec["chars"]
    assert checkpoint["seqattn_config"]["task_name"] == "text_pretrain"
    state = checkpoint["state_dict"]
    assert state["net.head.net.1.weight"].shape[0] == len(spec["vocab"])  # a head over the vocabulary
    assert "mask_vector" in state and not any(k.startswith("net.") and "mask_vector" in k for k in state)


@pytest.mark.slow
def test_a_pretraining_checkpoint_says_it_has_no_head_to_predict_with(pretrained, tmp_path):
    metrics, _ = pretrained
    with pytest.raises(ValueError, match=r"pretraining checkpoint.*nothing to predict with.*init_from="):
        seqattn.load(metrics["best_checkpoint"])
    from seqattn.export import export

    with pytest.raises(ValueError, match="cannot be exported: it is a pretraining checkpoint"):
        export(metrics["best_checkpoint"], "torchscript", tmp_path / "m.pt")


@pytest.mark.slow
@pytest.mark.parametrize("task", ["text_tagging", "text_cls"])
def test_fine_tuning_starts_from_the_pretrained_adapter_and_encoder_with_a_new_head(pretrained, task, tmp_path,
                                                                                      caplog):
    from tests.workflows import compose

    metrics, out = pretrained
    ckpt = metrics["best_checkpoint"]
    same_model = [] if task == "text_tagging" else ["model=text_transformer", "adapter.char_dim=256"]
    cfg = compose([f"task={task}", *SMALL, *same_model, "trainer.max_epochs=1", f"init_from={ckpt}"], tmp_path / "ft",
                  out / "data")
    assert_starts_from_pretraining(_objective(cfg), finetune_options(cfg), caplog,
                                   must_load=("net.adapter.table.", "net.adapter.chars."))
    assert "net.adapter: 6, net.encoder:" in caplog.text  # the log lists what loaded


@pytest.mark.slow
def test_another_width_positional_scheme_or_norm_order_is_an_error_naming_both(pretrained, tmp_path):
    from tests.workflows import compose

    metrics, out = pretrained
    ckpt = metrics["best_checkpoint"]
    for override, message in (("model.positional=sinusoidal", "model.positional='rotary', this model "
                                                               "model.positional='sinusoidal'"),
                              ("model.dim=48", "model.dim=32, this model model.dim=48"),
                              ("model.norm_first=false", "model.norm_first=True, this model model.norm_first=False")):
        cfg = compose(["task=text_tagging", *SMALL, override, f"init_from={ckpt}"], tmp_path / override, out / "data")
        with pytest.raises(ValueError, match=message):
            apply_finetune(_objective(cfg), finetune_options(cfg))


def test_unlabelled_files_are_read_as_sentences(compose_cfg, tmp_path):
    (tmp_path / "s.txt").write_text("".join(f"the cat sat {i} .\n\n  \nI saw a saw {i} .\n" for i in range(10)))
    conllu = "".join(f"1\tI\tI\tPRON\t_\t_\t0\t_\t_\t_\n2\tsaw{i}\tsee\tVERB\t_\t_\t0\t_\t_\t_\n\n" for i in range(10))
    (tmp_path / "t.conllu").write_text(conllu)
    for path, words, n in ((tmp_path / "s.txt", ["the", "cat", "sat", "3", "."], 20),
                           (tmp_path / "t.conllu", ["I", "saw0"], 10)):
        cfg = compose_cfg(["task=text_pretrain", f"data.train_path={path}", "data.val_fraction=0.2",
                           "data.test_fraction=0.2"])
        data = instantiate(cfg.data)
        data.setup("fit")
        assert data.source == "files" and sum(data.split_sizes().values()) == n
        batch = next(iter(data.train_dataloader()))
        assert set(batch) == {"words", "ids"}  # no labels
        assert any(it["tokens"] == words for split in data.datasets.values() for it in split)
        assert data.spec().labels is None and data.spec().num_outputs == len(data.vocab)


def _fine_tune_data(cfg):
    """The data of ``cfg`` as ``seqattn.run`` prepares it: ``finetune.vocabulary`` applied before setup."""
    datamodule = instantiate(cfg.data)
    use_checkpoint_vocabulary(datamodule, finetune_options(cfg))
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule


@pytest.mark.slow
def test_the_checkpoint_vocabulary_keeps_words_seen_only_in_pretraining(pretrained, tmp_path, caplog):
    from tests.workflows import compose

    metrics, out = pretrained
    ckpt = metrics["best_checkpoint"]
    source = read_checkpoint(ckpt)
    old_vocab, old_table = source["hyper_parameters"]["spec"]["vocab"], source["state_dict"]["net.adapter.table.weight"]
    few = ["task=text_tagging", *SMALL, "data.train_fraction=0.05", "trainer.max_epochs=1", f"init_from={ckpt}"]
    own = _fine_tune_data(compose(few, tmp_path / "own", out / "data"))
    cfg = compose([*few, "finetune.vocabulary=checkpoint"], tmp_path / "ft", out / "data")
    data = _fine_tune_data(cfg)
    seen = {w.lower() for it in data.datasets["train"] for w in it["tokens"]}
    only_pretrained = [w for w in old_vocab[2:] if w not in seen]
    assert only_pretrained and all(w not in own.vocab for w in only_pretrained)  # the data's own: <unk>
    assert data.vocab.to_list() == list(old_vocab) and data.chars == list(source["hyper_parameters"]["spec"]["chars"])
    model = build_objective(cfg, data)
    with caplog.at_level("INFO", logger="seqattn.training.finetune"):
        apply_finetune(model, finetune_options(cfg))
    assert f"embedding: {len(old_vocab)} of {len(old_vocab)} words from the checkpoint, 0 new" in caplog.text
    adapter, table = model.net.adapter, model.state_dict()["net.adapter.table.weight"]
    for word in only_pretrained:  # its index and its pretrained row, not <unk>'s
        index = old_vocab.index(word)
        assert adapter.vocab.encode([word]) == [index] and index != UNK_INDEX
        torch.testing.assert_close(table[index], old_table[index], rtol=0, atol=0, msg=word)
    tuned = train(cfg)  # seqattn.run applies it too: the fine-tuned checkpoint keeps the pretraining's words
    assert read_checkpoint(tuned["best_checkpoint"])["hyper_parameters"]["spec"]["vocab"] == list(old_vocab)
    assert tuned["finetune"]["vocabulary"] == "checkpoint"


def test_the_vocabulary_option_names_a_bad_value_and_what_it_lacks(compose_cfg, tmp_path):
    with pytest.raises(ValueError, match=r"finetune.vocabulary='chekpoint' is not one of \('data', 'checkpoint'\)"):
        finetune_options(compose_cfg(["task=text_tagging", "finetune.vocabulary=chekpoint"]))
    cfg = compose_cfg(["task=text_tagging", "finetune.vocabulary=checkpoint"])
    with pytest.raises(ValueError, match="finetune.vocabulary='checkpoint' .* init_from is not set"):
        use_checkpoint_vocabulary(instantiate(cfg.data), finetune_options(cfg))
    net, config = {"encoder": {"dim": 8}}, {"data": {"lowercase": True}}
    with_words, without = tmp_path / "words.ckpt", tmp_path / "none.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"net": net, "spec": {"num_outputs": 3, "vocab": [
        "<pad>", "<unk>", "only"], "chars": None}}, "seqattn_config": config}, with_words)
    torch.save({"state_dict": {}, "hyper_parameters": {"net": net, "spec": {"num_outputs": 3, "vocab": None}},
                "seqattn_config": config}, without)
    cfg = compose_cfg(["task=text_tagging", "finetune.vocabulary=checkpoint", f"init_from={without}"])
    with pytest.raises(ValueError, match=f"the checkpoint {without} has no vocabulary"):
        use_checkpoint_vocabulary(instantiate(cfg.data), finetune_options(cfg))
    cfg = compose_cfg(["task=image", "finetune.vocabulary=checkpoint", f"init_from={with_words}"])
    with pytest.raises(ValueError, match=r"this run's data \(\w+\) builds no vocabulary"):
        use_checkpoint_vocabulary(instantiate(cfg.data), finetune_options(cfg))
    cfg = compose_cfg(["task=text_tagging", "finetune.vocabulary=checkpoint", f"init_from={with_words}",
                       "data.lowercase=false"])
    with pytest.raises(ValueError, match="built with data.lowercase=True, this data has data.lowercase=False"):
        use_checkpoint_vocabulary(instantiate(cfg.data), finetune_options(cfg))
    cfg = compose_cfg(["task=text_tagging", "finetune.vocabulary=checkpoint", f"init_from={with_words}",
                       "data.synth.n_train=30", "data.synth.n_val=5", "data.synth.n_test=5"])
    data = instantiate(cfg.data)
    assert use_checkpoint_vocabulary(data, finetune_options(cfg)) == {"words": 3, "chars": None}
    data.setup("fit")
    assert data.vocab.to_list() == ["<pad>", "<unk>", "only"] and len(data.chars) > 10  # chars: from the data
    with pytest.raises(ValueError, match="must come before setup"):
        data.use_vocabulary(["<pad>", "<unk>"])
