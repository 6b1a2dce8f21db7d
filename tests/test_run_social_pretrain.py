"""End to end: `task=social_pretrain` learns hidden nodes' features on one unlabelled graph, `task=social
init_from=<it>` starts from its adapter and encoder with a new label head, and the citation-graph pair
(`experiment=citation_graph_pretrain` -> `experiment=citation_graph`) loads every adapter tensor although the
adapter averages features over the graph (propagate=2: a pretraining at propagate=0 would not load)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

import seqattn
from seqattn.run import build_objective, finetune_options, train
from seqattn.training.checkpoint import read_checkpoint
from tests.pretrain_checks import assert_starts_from_pretraining

QUIET = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "callbacks.early_stopping=null",
         "plot=false", "cpu_threads=1"]
SBM = ["data.source=sbm", "data.sbm.num_nodes=600", "data.sbm.blocks=3", "data.sbm.avg_degree=8", *QUIET]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    from tests.workflows import compose

    out = tmp_path_factory.mktemp("pretrain")
    cfg = compose(["task=social_pretrain", *SBM, "trainer.max_epochs=40"], out / "run", out / "data")
    return train(cfg), out


def _objective(cfg):
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return build_objective(cfg, datamodule), datamodule


def _val_losses(metrics) -> list[float]:
    with open(Path(metrics["output_dir"]) / "csv" / "metrics.csv", newline="") as f:
        return [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]


def test_pretraining_lowers_the_held_out_nodes_feature_loss(pretrained):
    metrics, _ = pretrained
    val = _val_losses(metrics)
    assert len(val) >= 40 and min(val[-5:]) < 0.85 * val[0], val
    checkpoint = read_checkpoint(metrics["best_checkpoint"])
    spec = checkpoint["hyper_parameters"]["spec"]
    assert spec["sizes"]["node_features"] == 8 and spec["labels"] is None
    assert checkpoint["state_dict"]["net.head.net.1.weight"].shape[0] == 8  # a head over the node's 8 features
    assert checkpoint["seqattn_config"]["adapter"]["propagate"] == 2  # task=social's adapter
    with pytest.raises(ValueError, match=r"pretraining checkpoint.*nothing to predict with.*init_from="):
        seqattn.load(metrics["best_checkpoint"])


def test_fine_tuning_node_labels_starts_from_the_pretrained_adapter_and_encoder_with_a_new_head(pretrained, tmp_path,
                                                                                                 caplog):
    from tests.workflows import compose

    metrics, out = pretrained
    cfg = compose(["task=social", *SBM, "trainer.max_epochs=1", f"init_from={metrics['best_checkpoint']}"],
                  tmp_path / "ft", out / "data")
    model, data = _objective(cfg)
    summary = assert_starts_from_pretraining(model, finetune_options(cfg), caplog, must_load=("net.adapter.node_proj.",))
    assert summary["loaded"] > 20
    assert model.hparams["spec"]["labels"] == data.label_names == ["b0", "b1", "b2"]


def _bag_of_words_graph(folder: Path, n: int = 60, words: int = 30) -> tuple[Path, Path]:
    """A tiny citation-like graph: 0/1 word features, 3 classes, a split column, as a user's two CSVs."""
    g = torch.Generator().manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    nodes, edges = folder / "nodes.csv", folder / "edges.csv"
    with open(nodes, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", *[f"w{j}" for j in range(words)], "label", "split"])
        for i in range(n):
            x = (torch.rand(words, generator=g) < 0.2).int().tolist()
            x[i % 3] = 1
            w.writerow([f"p{i}", *x, f"c{i % 3}", ("train", "val", "test")[i % 5 % 3]])
    with open(edges, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "target"])
        for i in range(n):
            w.writerow([f"p{i}", f"p{(i + 3) % n}"])
            w.writerow([f"p{i}", f"p{(i + 6) % n}"])
    return nodes, edges


def test_citation_graph_pretraining_loads_into_citation_graph_with_its_graph_averages(tmp_path, caplog):
    from tests.workflows import compose

    nodes, edges = _bag_of_words_graph(tmp_path / "graph")
    files = [f"data.nodes={nodes}", f"data.edges={edges}"]
    pre = compose(["task=social_pretrain", *files, "experiment=citation_graph_pretrain", *QUIET,
                   "trainer.max_epochs=3"], tmp_path / "pre", tmp_path / "data")
    fine = compose(["task=social", *files, "experiment=citation_graph", *QUIET, "trainer.max_epochs=1"],
                   tmp_path / "ft", tmp_path / "data")
    # the same inputs and network: every setting but regularisation and what the pretraining predicts
    def shape_of(group):
        return {k: v for k, v in group.items() if "dropout" not in k and "target" not in k}
    assert shape_of(pre.adapter) == shape_of(fine.adapter) and pre.adapter.propagate == 2
    assert shape_of(pre.model) == shape_of(fine.model)
    assert pre.data.normalize_features == fine.data.normalize_features == "row"
    assert pre.adapter.node_target == "present"

    metrics = train(pre)
    assert metrics["epochs"] == 3
    fine = compose(["task=social", *files, "experiment=citation_graph", *QUIET, "trainer.max_epochs=1",
                    f"init_from={metrics['best_checkpoint']}"], tmp_path / "ft", tmp_path / "data")
    model, _ = _objective(fine)
    with caplog.at_level(logging.WARNING, logger="seqattn.training.finetune"):
        assert_starts_from_pretraining(model, finetune_options(fine), caplog, must_load=("net.adapter.node_proj.",))
    assert "differs from the checkpoint" not in caplog.text
    assert model.net.adapter.node_proj.in_features == 30 * 3  # the features and their 1- and 2-step averages
