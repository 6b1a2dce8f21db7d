"""End to end: `task=text_tagging` and `task=text_cls` on small built-in corpora learn, write their
artefacts, and their checkpoints map raw words exactly as in training (no training data needed)."""

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from seqattn.objectives import SequenceClassification, SequenceLabeling
from seqattn.objectives.predictions import prediction_rows
from seqattn.run import train
from tests.workflows import accuracy_from_confusion, checkpoint_accuracy, macro_f1_from_confusion, majority_accuracy

QUIET = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "callbacks.early_stopping=null"]
TAGGING = ["task=text_tagging", "data.synth.n_train=500", "data.synth.n_val=60", "data.synth.n_test=120",
           "data.batch_size=32", "model.dim=32", "model.depth=2", "model.heads=2", "trainer.max_epochs=6", *QUIET]
# (bucket_by_length off: 38 batches per epoch are one sorted pool, which at this tiny size learns more slowly
# and noisily (0.61-0.86 vs 0.74-0.90 over two seeds); the full recipe buckets at no cost, tasks/text_cls)
CLS = ["task=text_cls", "data.synth.n_train=1200", "data.synth.n_val=100", "data.synth.n_test=200",
       "data.batch_size=32", "model.dim=32", "model.depth=2", "model.heads=2", "trainer.max_epochs=10",
       "data.bucket_by_length=false", *QUIET]


def _predict(model, loader):
    model.eval()
    outputs = []
    with torch.no_grad():
        for i, batch in enumerate(loader):
            outputs.append((batch, model.predict_step(batch, i)))
    return outputs


def _fresh_datamodule(model):
    """What `seqattn.predict` does: the data config from the checkpoint, no prepare_data()/setup()."""
    return instantiate(model.run_config["data"])


def test_tagging_recipe_learns_and_its_checkpoint_tags_raw_words(compose_cfg, tmp_path):
    cfg = compose_cfg(TAGGING)
    metrics = train(cfg)
    out = Path(metrics["output_dir"])
    assert (out / "word_embeddings.png").stat().st_size > 10_000
    assert (out / "test_sentence.png").stat().st_size > 10_000 and metrics["figure"].endswith("test_sentence.png")
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["test/acc"] == pytest.approx(accuracy_from_confusion(saved["confusion_matrix"]), abs=1e-6)
    assert saved["test/f1"] == pytest.approx(macro_f1_from_confusion(saved["confusion_matrix"]), abs=1e-5)
    assert metrics["test/acc"] > 0.8, metrics  # majority tag (NOUN) is ~0.3 of the words
    assert saved["subset_sizes"]["ambiguous"] > saved["subset_sizes"]["far"] > 0

    model = SequenceLabeling.load_from_checkpoint(out / "checkpoints" / "best.ckpt", map_location="cpu")
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    assert model.net.adapter.vocab.to_list() == datamodule.vocab.to_list()  # the tokenizer round trip
    assert model.labels == datamodule.label_names
    # the logger's hparams.yaml: the hyper-parameters and a one-line summary of the data, not its vocabulary (the
    # whole spec as YAML cost ~0.6 s per write on a real treebank); the checkpoint keeps the spec whole
    import yaml

    logged = yaml.safe_load((out / "csv" / "hparams.yaml").read_text())
    assert "spec" not in logged and logged["net"] == model.hparams["net"] and logged["labels"] == model.labels
    assert f"vocabulary {len(datamodule.vocab.to_list())} words" in logged["data"]
    assert model.hparams["spec"]["vocab"] == datamodule.vocab.to_list()

    # raw text in, through a datamodule that never saw the training data
    sentences = ["They can fish , paint , smoke and milk .", "I saw a saw near the old boat .",
                 "we sell , the farmer said , water ."]
    source = tmp_path / "input.txt"
    source.write_text("\n".join(sentences) + "\n")
    fresh = _fresh_datamodule(model)
    assert fresh.vocab is None and not fresh.datasets
    batched = [row for batch, output in _predict(model, fresh.predict_loader(source, batch_size=3))
               for row in prediction_rows(output, fresh.describe(batch))]
    alone = [row for batch, output in _predict(model, fresh.predict_loader(source, batch_size=1))
             for row in prediction_rows(output, fresh.describe(batch))]
    assert [r["labels"] for r in batched] == [r["labels"] for r in alone]
    for b, a in zip(batched, alone):
        assert b["probs"] == pytest.approx(a["probs"], abs=1e-4)
    assert batched[0]["tokens"] == sentences[0].split() and batched[0]["id"] == "input.txt:1"
    assert len(batched[1]["labels"]) == 9 and set(batched[1]["labels"]) <= set(model.labels)

    # the loaded model scores the test split as the run reported: accuracy and both subsets, counted by hand
    model.eval()
    counts = {"all": [0, 0], "ambiguous": [0, 0], "far": [0, 0]}
    with torch.no_grad():
        for batch in datamodule.test_dataloader():
            pred = model(batch)["logits"].argmax(-1)
            labeled = batch["labels"] != -100
            for name, keep in (("all", labeled), ("ambiguous", batch["subsets"]["ambiguous"] & labeled),
                               ("far", batch["subsets"]["far"] & labeled)):
                counts[name][0] += int((pred[keep] == batch["labels"][keep]).sum())
                counts[name][1] += int(keep.sum())
    assert metrics["test/acc"] == pytest.approx(counts["all"][0] / counts["all"][1], abs=1e-6)
    assert metrics["test/acc_ambiguous"] == pytest.approx(counts["ambiguous"][0] / counts["ambiguous"][1], abs=1e-6)
    assert metrics["test/acc_far"] == pytest.approx(counts["far"][0] / counts["far"][1], abs=1e-6)
    assert saved["subset_sizes"] == {"ambiguous": counts["ambiguous"][1], "far": counts["far"][1]}


def test_tagging_baselines_run_through_the_same_recipe(compose_cfg):
    majority = None
    for name, encoder in (("window_mlp", "WindowMLP"), ("bilstm", "BiLSTM")):
        overrides = [o for o in TAGGING if not o.startswith("model.heads")]
        cfg = compose_cfg([*overrides, f"model={name}", "model.dim=32", "trainer.max_epochs=2"], run=name)
        metrics = train(cfg)
        assert metrics["encoder"] == encoder
        assert "test/acc_far" in metrics and Path(metrics["figure"]).is_file()
        majority = majority or majority_accuracy(instantiate(cfg.data))
        print(name, "test accuracy", metrics["test/acc"], "majority tag", majority)
        assert metrics["test/acc"] > majority + 0.1  # it learned: well above tagging every word with the commonest tag


def test_classification_recipe_learns_and_predicts_raw_text(compose_cfg, tmp_path):
    cfg = compose_cfg(CLS)
    metrics = train(cfg)
    assert metrics["test/acc"] > 0.7, metrics  # balanced classes: chance is 0.5
    out = Path(metrics["output_dir"])
    assert (out / "word_embeddings.png").is_file() and (out / "test_sentence.png").is_file()

    model = SequenceClassification.load_from_checkpoint(metrics["best_checkpoint"], map_location="cpu")
    assert model.net.global_token is not None  # head.pooling=cls by default
    source = tmp_path / "reviews.csv"
    source.write_text('text\n"The film was not bad, really."\n"good but boring ."\n"boring but good ."\n')
    fresh = _fresh_datamodule(model)
    rows = [row for batch, output in _predict(model, fresh.predict_loader(source, batch_size=2))
            for row in prediction_rows(output, fresh.describe(batch))]
    alone = [row for batch, output in _predict(model, fresh.predict_loader(source, batch_size=1))
             for row in prediction_rows(output, fresh.describe(batch))]
    assert [r["label"] for r in rows] == [r["label"] for r in alone]
    assert [r["prob"] for r in rows] == pytest.approx([r["prob"] for r in alone], abs=1e-4)
    assert rows[0]["id"] == "reviews.csv:2" and rows[0]["text"].startswith("The film was not bad")
    assert {r["label"] for r in rows} <= {"neg", "pos"}


@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_classification_pooling_by_config(compose_cfg, pooling):
    cfg = compose_cfg([*CLS, f"head.pooling={pooling}", "trainer.max_epochs=1", "plot=false"], run=pooling)
    metrics = train(cfg)
    model = SequenceClassification.load_from_checkpoint(metrics["best_checkpoint"], map_location="cpu")
    assert model.net.global_token is None and model.net.head.pooling == pooling
    # one epoch does not learn much: what is checked is that the pooled network that was tested is the
    # checkpoint's, and that pooling ignores padding (an item scores the same alone as in a padded batch)
    datamodule = instantiate(cfg.data)
    assert metrics["test/acc"] == pytest.approx(checkpoint_accuracy(metrics["best_checkpoint"], datamodule), abs=1e-6)
    model.eval()
    items = [datamodule.datasets["test"][i] for i in range(4)]
    batch = datamodule.test_dataloader().collate_fn(items)
    assert len({len(w) for w in batch["words"]}) > 1  # the items differ in length: padding in the batch
    with torch.no_grad():
        together = model.net(batch)["logits"]
        alone = torch.cat([model.net(datamodule.test_dataloader().collate_fn([it]))["logits"] for it in items])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_attention_beats_the_window_baseline_on_far_decided_words(compose_cfg):
    """On a small built-in corpus, the words whose deciding cue is beyond ±4 words: attention tags
    them well, the ±4 window tagger is near chance (the two readings look the same inside its window)."""
    common = ["task=text_tagging", "data.synth.n_train=2000", "data.synth.n_val=200", "data.synth.n_test=400",
              "data.batch_size=32", "model.dim=48", "model.depth=2", "trainer.max_epochs=8", "plot=false", *QUIET]
    attention = train(compose_cfg([*common, "model.heads=4"], run="attention"))
    window = train(compose_cfg([*common, "model=window_mlp", "model.dim=48", "model.depth=2"], run="window"))
    assert window["test/acc_far"] < 0.75, window
    assert attention["test/acc_far"] > window["test/acc_far"] + 0.2, (attention, window)
    assert attention["test/acc_ambiguous"] > window["test/acc_ambiguous"] + 0.05
