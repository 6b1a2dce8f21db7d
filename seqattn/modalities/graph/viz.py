"""Graph figures: predicted vs true properties over the test set and one molecule's attention
(``task=molecule``); predicted communities of a social network (``task=social``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from seqattn.labels import IGNORE_INDEX
from seqattn.viz import plt


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@torch.no_grad()
def collect_predictions(model, loader) -> tuple[np.ndarray, np.ndarray]:
    """``(pred [n, T], true [n, T])`` in original units (probabilities for classification targets)."""
    preds, trues = [], []
    for batch in loader:
        batch = _to(batch, model.device)
        preds.append(model.predict_values(model(batch)["logits"]).float().cpu())
        trues.append(batch["targets"].float().cpu())
    return torch.cat(preds).numpy(), torch.cat(trues).numpy()


def _draw_molecule(ax, smiles: str, weights: np.ndarray, title: str, tokens: str = "atoms") -> None:
    """Atoms at RDKit 2-D coordinates, bonds as lines; ``weights`` colour the tokens: ``[n]`` atoms
    (``tokens="atoms"``), or ``[m + lone]`` bonds in RDKit's order, then the atoms without bonds
    (``tokens="bonds"``, :func:`~seqattn.modalities.graph.molecules.bond_graph`'s order)."""
    from matplotlib import colors as mcolors
    from rdkit import Chem
    from rdkit.Chem import AllChem

    mol = Chem.MolFromSmiles(smiles)
    AllChem.Compute2DCoords(mol)
    pos = mol.GetConformer().GetPositions()[:, :2]
    bonds = list(mol.GetBonds())
    norm = mcolors.Normalize(float(weights.min()), float(weights.max()) + 1e-12)
    cmap = plt.get_cmap("viridis")
    atom_weights = weights  # [n]; bond tokens: NaN (grey) except the atoms without bonds, which follow the bonds
    if tokens == "bonds":
        lone = [a.GetIdx() for a in mol.GetAtoms() if a.GetDegree() == 0]
        atom_weights = np.full(len(pos), np.nan)
        atom_weights[lone] = weights[len(bonds): len(bonds) + len(lone)]
    for b, bond in enumerate(bonds):
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        width = {1.0: 1.2, 1.5: 2.0, 2.0: 2.8, 3.0: 3.6}.get(bond.GetBondTypeAsDouble(), 1.2)
        if tokens == "bonds":
            ax.plot(pos[[i, j], 0], pos[[i, j], 1], color=cmap(norm(weights[b])), lw=3 * width + 2, zorder=1)
        else:
            ax.plot(pos[[i, j], 0], pos[[i, j], 1], color="0.55", lw=width, zorder=1)
    coloured = ~np.isnan(atom_weights)
    ax.scatter(pos[~coloured, 0], pos[~coloured, 1], c="0.6", s=160, zorder=2, edgecolors="k")
    ax.scatter(pos[coloured, 0], pos[coloured, 1], c=atom_weights[coloured], cmap=cmap, norm=norm, s=260, zorder=2,
               edgecolors="k")
    for k, atom in enumerate(mol.GetAtoms()):
        ax.text(pos[k, 0], pos[k, 1], atom.GetSymbol(), ha="center", va="center", fontsize=8, color="w", zorder=3)
    plt.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.046, pad=0.02)
    ax.set_title(title, fontsize=9)
    ax.set_aspect("equal")
    ax.set_axis_off()


@torch.no_grad()
def plot_molecule_property(model, datamodule, out_dir: str | Path, layer: int = -1) -> Path:
    """``out_dir/test_properties.png``: for the first target, predicted vs true over the test set
    (regression, with RMSE/MAE and the training-mean baseline) or the predicted probability per class
    (classification); and, for one test molecule, the attention of ``layer`` (mean over heads) as a
    matrix and as the attention each atom (or, ``data.tokens=bonds``, each bond) receives, drawn on the molecule."""
    model.eval()
    datamodule.setup("test")
    loader = datamodule.test_dataloader()
    pred, true = collect_predictions(model, loader)
    names = list(model.target_names)
    kind = model.kinds[0]

    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), constrained_layout=True)
    ax = axes[0]
    keep = ~np.isnan(true[:, 0])
    p, t = pred[keep, 0], true[keep, 0]
    if kind == "regression":
        rmse, mae = float(np.sqrt(np.mean((p - t) ** 2))), float(np.mean(np.abs(p - t)))
        base = float(model.target_mean[0])
        base_rmse = float(np.sqrt(np.mean((base - t) ** 2)))
        ax.scatter(t, p, s=6, alpha=0.5)
        lo, hi = float(min(t.min(), p.min())), float(max(t.max(), p.max()))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
        ax.axhline(base, color="tab:red", lw=1, label=f"training mean (RMSE {base_rmse:.2f})")
        ax.set_xlabel(f"true {names[0]}")
        ax.set_ylabel(f"predicted {names[0]}")
        ax.set_title(f"test set ({keep.sum()} molecules): RMSE {rmse:.2f}, MAE {mae:.2f}")
        ax.legend(loc="upper left", fontsize=8)
    else:
        for cls, colour in ((0, "tab:blue"), (1, "tab:orange")):
            ax.hist(p[t == cls], bins=20, range=(0, 1), alpha=0.6, color=colour, label=f"true {cls}")
        ax.set_xlabel(f"predicted P({names[0]} = 1)")
        ax.set_title(f"test set ({keep.sum()} molecules)")
        ax.legend(fontsize=8)

    batch = _to(next(iter(loader)), model.device)
    out = model.net(batch, return_attention=[layer])
    index = int(torch.argmax(batch["mask"].sum(1).clamp(max=24)))  # a mid-sized molecule
    n = int(batch["mask"][index].sum())
    offset = out["tokens"].num_global
    attn = out["attention"][0][index, :, offset: offset + n, offset: offset + n].mean(0).float().cpu().numpy()
    smiles = batch["smiles"][index]
    image = axes[1].imshow(attn, cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=axes[1], fraction=0.046, pad=0.02)
    name = "last layer" if layer == -1 else f"layer {layer}"
    tokens = getattr(datamodule, "tokens", "atoms")
    unit = tokens[:-1]  # atom | bond
    axes[1].set_title(f"attention of the {name} (mean over heads)\nrows: query {unit}, columns: key {unit}", fontsize=9)
    axes[1].set_xlabel(f"key {unit}")
    axes[1].set_ylabel(f"query {unit}")
    value = model.predict_values(out["logits"])[index, 0].item()
    truth = batch["targets"][index, 0].item()
    _draw_molecule(axes[2], smiles, attn.sum(0),
                   f"{smiles}\nattention received per {unit}; {names[0]}: predicted {value:.1f}, true {truth:.1f}",
                   tokens=tokens)
    path = Path(out_dir) / "test_properties.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

# ---------------------------------------------------------------------------------------------
# social networks



@torch.no_grad()
def predict_nodes(model, loader) -> torch.Tensor:
    """Predicted class per node of the graph ``[N_graph]`` (-1 where ``loader`` predicts none), from
    batches carrying ``seed_mask [B, N]`` and ``node_index [B, N]`` (global node index)."""
    model.eval()
    preds: dict[int, int] = {}
    for batch in loader:
        batch = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        logits = model(batch)["logits"]  # [B, N, C]
        chosen = batch["seed_mask"]
        for node, pred in zip(batch["node_index"][chosen].tolist(), logits.argmax(-1)[chosen].tolist()):
            preds[node] = pred
    size = max(preds) + 1 if preds else 0
    out = torch.full((size,), -1, dtype=torch.long)
    if preds:
        out[torch.tensor(list(preds))] = torch.tensor(list(preds.values()))
    return out


def _shown_nodes(graph, max_nodes: int, seed: int) -> np.ndarray:
    """All nodes of a small graph; for a large one, test nodes and their neighbours by BFS up to ``max_nodes``."""
    n = graph.num_nodes
    if n <= max_nodes:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    test = graph.nodes_of("test").numpy()
    start = rng.choice(test if test.size else np.arange(n), size=min(8, max(1, test.size)), replace=False)
    src, dst = graph.edge_index.numpy()
    order = np.argsort(dst, kind="stable")
    src_by_dst, ptr = src[order], np.searchsorted(dst[order], np.arange(n + 1))
    shown, frontier = list(dict.fromkeys(start.tolist())), list(start)
    seen = set(shown)
    while frontier and len(shown) < max_nodes:
        nxt = []
        for v in frontier:
            for u in src_by_dst[ptr[v]:ptr[v + 1]].tolist():
                if u not in seen and len(shown) < max_nodes:
                    seen.add(u)
                    shown.append(u)
                    nxt.append(u)
        frontier = nxt
    return np.array(sorted(shown))


def _layout(nodes: np.ndarray, edges: np.ndarray, seed: int) -> np.ndarray:
    """2-D positions ``[n, 2]``: networkx's spring layout when installed, else a simple
    force-directed layout of our own (same idea, fixed iterations)."""
    n = len(nodes)
    try:
        import networkx as nx

        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_edges_from(edges.T.tolist())
        pos = nx.spring_layout(g, seed=seed)
        return np.array([pos[i] for i in range(n)])
    except ImportError:
        rng = np.random.default_rng(seed)
        pos = rng.uniform(-1, 1, (n, 2))
        k = 1.0 / np.sqrt(max(n, 1))
        for step in range(100):
            delta = pos[:, None] - pos[None]  # [n, n, 2]
            dist = np.linalg.norm(delta, axis=-1) + 1e-9
            force = (delta / dist[..., None] * (k * k / dist)[..., None]).sum(1)  # repulsion
            if edges.size:
                d = pos[edges[0]] - pos[edges[1]]
                pull = d * np.linalg.norm(d, axis=1, keepdims=True) / k
                np.add.at(force, edges[0], -pull)
                np.add.at(force, edges[1], pull)
            length = np.linalg.norm(force, axis=1, keepdims=True) + 1e-9
            pos += force / length * np.minimum(length, 0.1 * (1 - step / 100))
        return pos


def plot_node_classification(model, datamodule, out_dir: str | Path, max_nodes: int = 300) -> Path:
    """The graph (all of a small one; test nodes and their neighbourhood for a large one) drawn
    twice: coloured by true class and by predicted class. Squares are training nodes, circles
    val/test/unlabeled nodes; a red ring marks a wrong prediction on a test node.
    Returns ``out_dir/test_graph.png``."""
    datamodule.setup("test")
    graph = datamodule.graph
    shown = _shown_nodes(graph, max_nodes, seed=0)
    pred_all = predict_nodes(model, datamodule.node_loader(torch.as_tensor(shown)))
    pred = np.full(len(shown), -1)
    known = shown < len(pred_all)
    pred[known] = pred_all.numpy()[shown[known]]
    local = np.full(graph.num_nodes, -1)
    local[shown] = np.arange(len(shown))
    src, dst = graph.edge_index.numpy()
    keep = (local[src] >= 0) & (local[dst] >= 0) & (src < dst)
    edges = np.stack([local[src[keep]], local[dst[keep]]]) if keep.any() else np.zeros((2, 0), dtype=int)
    pos = _layout(shown, edges, seed=0)
    true = graph.y.numpy()[shown]
    split = graph.split.numpy()[shown]
    names = list(model.labels or graph.label_names)
    colors = np.array(plt.get_cmap("tab10").colors + plt.get_cmap("tab20b").colors)
    test = (split == 2) & (true != IGNORE_INDEX)
    wrong = test & (pred != true)
    acc = float((pred[test] == true[test]).mean()) if test.any() else float("nan")

    fig, axes = plt.subplots(1, 2, figsize=(13, 6.2), constrained_layout=True)
    for ax, labels, title in ((axes[0], true, "true class"),
                              (axes[1], pred, f"predicted class (accuracy {acc:.2f} on the {int(test.sum())} test nodes shown)")):
        for a, b in edges.T:
            ax.plot(*pos[[a, b]].T, color="0.75", lw=0.6, zorder=1)
        color = np.where(labels[:, None] >= 0, colors[np.clip(labels, 0, len(colors) - 1) % len(colors)], 0.85)
        for marker, sel in (("s", split == 0), ("o", split != 0)):
            ax.scatter(*pos[sel].T, c=color[sel], marker=marker, s=90 if len(shown) <= 60 else 25,
                       edgecolors="k", linewidths=0.4, zorder=2)
        if labels is pred and wrong.any():
            ax.scatter(*pos[wrong].T, facecolors="none", edgecolors="red", s=260 if len(shown) <= 60 else 80,
                       linewidths=1.6, zorder=3)
        if len(shown) <= 60:
            for i, node in enumerate(shown):
                ax.text(*pos[i], graph.ids[node], fontsize=6, ha="center", va="center", zorder=4)
        ax.set_title(title)
        ax.set_axis_off()
    handles = [plt.Line2D([], [], marker="o", ls="", color=colors[i % len(colors)], label=name)
               for i, name in enumerate(names)]
    handles += [plt.Line2D([], [], marker="s", ls="", mfc="w", mec="k", label="train node"),
                plt.Line2D([], [], marker="o", ls="", mfc="w", mec="red", mew=1.6, label="wrong (test)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    what = f"{len(shown)} of {graph.num_nodes} nodes" if len(shown) < graph.num_nodes else f"{graph.num_nodes} nodes"
    fig.suptitle(f"{type(model.net.encoder).__name__} on {what}, {int(graph.edge_index.shape[1] // 2)} edges")
    path = Path(out_dir) / "test_graph.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
