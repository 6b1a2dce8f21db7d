"""End to end: `python -m seqattn.run task=social` learns karate-club communities, neighbour-sampled
training learns the communities of a stochastic block model, and prediction through the predict
protocol gives the same labels batched and one node at a time."""

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from seqattn.labels import IGNORE_INDEX
from seqattn.objectives import SequenceLabeling
from seqattn.objectives.predictions import prediction_rows
from seqattn.run import train

QUIET = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
KARATE = ["task=social", "model.dim=32", "model.depth=2", "trainer.max_epochs=80", *QUIET]
SBM = ["task=social", "data.source=sbm", "data.mode=sampled", "data.num_neighbors=[6,4]", "data.batch_size=32",
       "data.sbm.num_nodes=900", "data.sbm.blocks=3", "data.sbm.avg_degree=8", "data.sbm.feature_noise=2.5",
       "model.dim=32", "model.depth=2", "trainer.max_epochs=12", "callbacks.early_stopping=null",
       "plot=false", *QUIET]


def _majority(datamodule, stage="test") -> float:
    g = datamodule.graph
    y = g.y[g.nodes_of(stage)]
    return float(torch.bincount(y).max() / y.numel())


def test_karate_recipe_learns_and_writes_its_artefacts(compose_cfg):
    cfg = compose_cfg(KARATE)
    metrics = train(cfg)
    out = Path(metrics["output_dir"])
    assert (out / "checkpoints" / "best.ckpt").is_file()
    assert (out / "test_graph.png").stat().st_size > 20_000
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["test/acc"] == pytest.approx(metrics["test/acc"])

    datamodule = instantiate(cfg.data)
    datamodule.setup("test")
    assert metrics["test/acc"] > _majority(datamodule) + 0.25, metrics["test/acc"]

    model = SequenceLabeling.load_from_checkpoint(out / "checkpoints" / "best.ckpt", map_location="cpu")
    assert model.labels == datamodule.label_names == ["c0", "c1", "c2", "c3"]
    assert model.net.adapter.node_features == 34 and model.net.adapter.propagate == 2  # the task defaults


def test_no_graph_attention_baseline_runs_through_the_same_recipe(compose_cfg):
    cfg = compose_cfg(KARATE + ["model=no_context", "model.dim=32", "trainer.max_epochs=30"])
    metrics = train(cfg)
    assert metrics["encoder"] == "TokenwiseMLP"
    assert Path(metrics["figure"]).is_file()
    datamodule = instantiate(cfg.data)
    datamodule.setup("test")
    print("no-graph test accuracy", metrics["test/acc"], "majority", _majority(datamodule))
    assert metrics["test/acc"] > _majority(datamodule) + 0.1  # the propagated features alone carry the clubs


def _predict(model, loader, datamodule):
    rows = []
    model.eval()
    with torch.no_grad():
        for i, batch in enumerate(loader):
            rows += prediction_rows(model.predict_step(batch, i), datamodule.describe(batch))
    return rows


def test_predict_protocol_batched_equals_one_at_a_time(compose_cfg, tmp_path):
    cfg = compose_cfg(KARATE + ["trainer.max_epochs=20", "plot=false"])
    metrics = train(cfg)
    model = SequenceLabeling.load_from_checkpoint(metrics["best_checkpoint"], map_location="cpu")
    data_cfg = model.run_config["data"]  # the checkpoint's own data config; no setup(), no training data

    full = instantiate(data_cfg)
    nodes_csv = full.graph_files()[0]  # the karate node CSV: its labels are ignored for prediction
    rows = _predict(model, full.predict_loader(nodes_csv), full)
    assert [r["id"] for r in rows] == [str(i) for i in range(34)]
    assert all(r["label"] in model.labels and 0.0 < r["prob"] <= 1.0 for r in rows)
    # the whole-graph prediction is what the test stage scored
    full.setup("test")
    batch = next(iter(full.test_dataloader()))
    with torch.no_grad():
        expected = model(batch)["logits"][0].argmax(-1)
    assert [r["label"] for r in rows] == [model.labels[k] for k in expected.tolist()]

    sampled = instantiate({**data_cfg, "mode": "sampled", "num_neighbors": [3, 2]})
    batched = _predict(model, sampled.predict_loader(nodes_csv, batch_size=8), sampled)
    alone = _predict(model, sampled.predict_loader(nodes_csv, batch_size=1), sampled)
    assert [r["id"] for r in batched] == [r["id"] for r in alone] == [str(i) for i in range(34)]
    assert [r["label"] for r in batched] == [r["label"] for r in alone]
    assert [r["prob"] for r in batched] == pytest.approx([r["prob"] for r in alone], abs=1e-5)


def test_neighbour_sampled_training_learns_sbm_communities(compose_cfg):
    cfg = compose_cfg(SBM)
    metrics = train(cfg)
    datamodule = instantiate(cfg.data)
    datamodule.setup("test")
    assert datamodule.resolved_mode(datamodule.graph.num_nodes) == "sampled"
    chance = _majority(datamodule)
    assert metrics["test/acc"] > chance + 0.4, (metrics["test/acc"], chance)


@pytest.mark.slow
def test_graph_attention_beats_no_context_on_sampled_sbm(compose_cfg):
    """With neighbour sampling, attention over the sampled neighbourhood beats each node alone."""
    attention = train(compose_cfg(SBM, run="attention"))
    # alone = no graph at all: the task's default neighbourhood-averaged features (adapter.propagate) off too
    alone = train(compose_cfg(SBM + ["model=no_context", "model.dim=32", "adapter.propagate=0"], run="alone"))
    assert attention["test/acc"] > alone["test/acc"] + 0.15, (attention["test/acc"], alone["test/acc"])


def test_social_model_propagates_its_output_and_the_no_context_baseline_does_not(compose_cfg):
    """task=social trains model=node_transformer (the graph transformer + 10 PPR output steps); the documented
    baseline ``model=no_context`` replaces the whole model group (no propagation key reaches it);
    experiment=citation_graph keeps the propagation with its own choices."""
    from seqattn.core import Encoder

    cfg = compose_cfg(["task=social"])
    assert cfg.model.output_propagation == 10 and cfg.model.propagation_alpha == 0.1
    encoder = instantiate(cfg.model, dim=8, heads=2, depth=1)
    assert isinstance(encoder, Encoder) and encoder.output_propagation == 10
    baseline = compose_cfg(["task=social", "model=no_context", "adapter.propagate=0"], run="alone")
    assert "output_propagation" not in baseline.model
    instantiate(baseline.model)
    cora = compose_cfg(["task=social", "experiment=citation_graph"], run="cora")
    assert cora.model.output_propagation == 10 and cora.model.depth == 1 and cora.adapter.propagate == 2
