"""Node classification on real graphs: Cora (Planetoid split) vs PyG's GAT, and Zachary's karate club
with the standard four labelled nodes (one per community) vs GAT and GCN.

The seqattn side runs the ``social`` recipe through the command a user types; the references are
PyG's ``GATConv`` (2 layers, 8 heads × 8 hidden, ELU, dropout 0.6, lr 0.005, weight decay 5e-4,
as in Veličković et al. 2018) and ``GCNConv`` (2 layers, 16 hidden, dropout 0.5), trained on the same
nodes, with the same features (row-normalised bag of words for Cora) and the same split.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from seqattn.bench.real import Context, Result, command_line, compare_seeds

CORA_SEEDS = 10
KARATE_SEEDS = 10
#: ``--quick`` (development): seeds and epochs per run of both sides
QUICK = {"cora": (2, 60), "karate4": (3, 100)}
#: what the GAT / GCN references import (their start-up as a command of their own is measured beside the table)
GRAPH_IMPORTS = ("torch", "torch_geometric.nn", "torch_geometric.datasets")


def _quick(ctx: Context, case: str) -> tuple[list[str], dict, str]:
    """Under ``--quick``: the recipe overrides, the reference's keyword arguments and the note that say so."""
    if not ctx.quick:
        return [], {}, ""
    _, epochs = QUICK[case]
    return [f"trainer.max_epochs={epochs}"], {"epochs": epochs}, f"QUICK: {epochs} epochs on both sides; "


def _planetoid(ctx: Context):
    """PyG's Planetoid Cora from the shared raw files (copied: PyG writes its processed files beside them)."""
    import torch_geometric.transforms as T
    from torch_geometric.datasets import Planetoid

    raw = ctx.data / "Cora" / "raw"
    if not raw.is_dir():
        raise FileNotFoundError(f"no Planetoid raw files at {raw}")
    root = ctx.work / "pyg"
    if not (root / "Cora" / "raw").is_dir():
        shutil.copytree(raw, root / "Cora" / "raw")
    return Planetoid(str(root), "Cora", transform=T.NormalizeFeatures())[0]


def train_reference(data, kind: str, seed: int, epochs: int = 500, patience: int = 100) -> float:
    """GAT or GCN on a PyG ``Data`` with train/val/test masks; the test accuracy of the epoch with the best
    validation accuracy (ties: lower validation loss), or of the last epoch when there is no validation."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv, GCNConv

    torch.manual_seed(seed)
    classes = int(data.y.max()) + 1
    if kind == "gat":
        conv1 = GATConv(data.num_features, 8, heads=8, dropout=0.6)
        conv2 = GATConv(8 * 8, classes, heads=1, concat=False, dropout=0.6)
        drop, act, lr, wd = 0.6, F.elu, 0.005, 5e-4
    else:
        conv1, conv2 = GCNConv(data.num_features, 16), GCNConv(16, classes)
        drop, act, lr, wd = 0.5, F.relu, 0.01, 5e-4
    model = torch.nn.ModuleList([conv1, conv2])
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)

    def forward(train: bool):
        x = F.dropout(data.x, drop, training=train)
        x = act(conv1(x, data.edge_index))
        x = F.dropout(x, drop, training=train)
        return conv2(x, data.edge_index)

    has_val = bool(data.val_mask.any())
    best, best_test, bad = (-1.0, 0.0), 0.0, 0
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        F.cross_entropy(forward(True)[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            out = forward(False)
            test = float((out[data.test_mask].argmax(-1) == data.y[data.test_mask]).float().mean())
            if not has_val:
                best_test = test
                continue
            val_acc = float((out[data.val_mask].argmax(-1) == data.y[data.val_mask]).float().mean())
            val_loss = float(F.cross_entropy(out[data.val_mask], data.y[data.val_mask]))
        if (val_acc, -val_loss) > best:
            best, best_test, bad = (val_acc, -val_loss), test, 0
        else:
            bad += 1
            if bad >= patience:
                break
    return best_test


def case_cora(ctx: Context) -> Result:
    data = _planetoid(ctx)
    overrides = ["task=social", "data.source=planetoid", f"data.root={ctx.data}", "experiment=citation_graph"]
    short, ref_kw, note = _quick(ctx, "cora")
    seqattn, seq_s, ref, ref_s = compare_seeds(ctx, "cora", overrides + short, ctx.choose(CORA_SEEDS, QUICK["cora"][0]),
                                               lambda seed: train_reference(data, "gat", seed, **ref_kw), "GAT")
    return Result("Cora (Planetoid split: 140 / 500 / 1000 nodes)", "test accuracy", False, seqattn, ref,
                  "PyG GATConv (2 layers, 8×8, dropout 0.6)", seq_s, ref_s, command_line(overrides + short),
                  notes=note + "GAT paper: 83.0 ± 0.7", reference_imports=GRAPH_IMPORTS)


def karate_four_labels(folder: Path) -> tuple[Path, Path, object]:
    """The karate club with PyG's standard training nodes (one per community) as the only labelled
    nodes of the training split and every other node in the test split, no validation: the node CSV
    a user would write, the edge CSV, and the same graph as a PyG ``Data`` for the references."""
    import torch
    from torch_geometric.datasets import KarateClub

    g = KarateClub()[0]
    folder.mkdir(parents=True, exist_ok=True)
    nodes, edges = folder / "karate4_nodes.csv", folder / "karate4_edges.csv"
    with open(nodes, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", *[f"f{j}" for j in range(g.x.shape[1])], "label", "split"])
        for i in range(g.num_nodes):
            w.writerow([str(i), *[f"{v:g}" for v in g.x[i].tolist()], f"c{int(g.y[i])}",
                        "train" if bool(g.train_mask[i]) else "test"])
    with open(edges, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "target"])
        for a, b in g.edge_index[:, g.edge_index[0] < g.edge_index[1]].t().tolist():
            w.writerow([str(a), str(b)])
    g.test_mask = ~g.train_mask
    g.val_mask = torch.zeros_like(g.train_mask)
    return nodes, edges, g


def case_karate4(ctx: Context) -> Result:
    nodes, edges, data = karate_four_labels(ctx.work)
    overrides = ["task=social", f"data.nodes={nodes}", f"data.edges={edges}"]
    short, ref_kw, note = _quick(ctx, "karate4")
    epochs = ref_kw.get("epochs", 200)
    gcn = []
    seqattn, seq_s, gat, gat_s = compare_seeds(ctx, "karate4", overrides + short,
                                               ctx.choose(KARATE_SEEDS, QUICK["karate4"][0]),
                                               lambda seed: train_reference(data, "gat", seed, epochs=epochs), "GAT")
    for seed in ctx.seed_list(len(seqattn)):  # the second reference on the same seeds, not timed
        gcn.append(train_reference(data, "gcn", seed, epochs=epochs))
        ctx.log(f"karate4 seed {seed}: GCN {gcn[-1]:.4f}")
    import statistics

    return Result("Karate club, 4 labelled nodes (one per community), 30 test, no validation", "test accuracy",
                  False, seqattn, gat, f"PyG GATConv ({epochs} epochs, last)", seq_s, gat_s,
                  command_line(overrides + short), notes=note + f"GCN on the same split: {statistics.fmean(gcn):.4f} ± "
                        f"{statistics.stdev(gcn) if len(gcn) > 1 else 0:.4f}", reference_imports=GRAPH_IMPORTS)
