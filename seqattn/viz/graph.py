"""Graph figures: predicted vs true properties over the test set, and one molecule's attention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from seqattn.viz.common import plt


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


def _draw_molecule(ax, smiles: str, weights: np.ndarray, title: str) -> None:
    """Atoms at RDKit 2-D coordinates, coloured by ``weights [n]``; bonds as lines."""
    from rdkit import Chem
    from rdkit.Chem import AllChem

    mol = Chem.MolFromSmiles(smiles)
    AllChem.Compute2DCoords(mol)
    pos = mol.GetConformer().GetPositions()[:, :2]
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        width = {1.0: 1.2, 1.5: 2.0, 2.0: 2.8, 3.0: 3.6}.get(bond.GetBondTypeAsDouble(), 1.2)
        ax.plot(pos[[i, j], 0], pos[[i, j], 1], color="0.55", lw=width, zorder=1)
    points = ax.scatter(pos[:, 0], pos[:, 1], c=weights, cmap="viridis", s=260, zorder=2, edgecolors="k")
    for k, atom in enumerate(mol.GetAtoms()):
        ax.text(pos[k, 0], pos[k, 1], atom.GetSymbol(), ha="center", va="center", fontsize=8, color="w", zorder=3)
    plt.colorbar(points, ax=ax, fraction=0.046, pad=0.02)
    ax.set_title(title, fontsize=9)
    ax.set_aspect("equal")
    ax.set_axis_off()


@torch.no_grad()
def plot_molecule_property(model, datamodule, out_dir: str | Path, layer: int = -1) -> Path:
    """``out_dir/test_properties.png``: for the first target, predicted vs true over the test set
    (regression, with RMSE/MAE and the training-mean baseline) or the predicted probability per class
    (classification); and, for one test molecule, the attention of ``layer`` (mean over heads) as a
    matrix and as the attention each atom receives, drawn on the molecule."""
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
    offset = 1 if model.net.global_token is not None else 0
    attn = out["attention"][0][index, :, offset: offset + n, offset: offset + n].mean(0).float().cpu().numpy()
    smiles = batch["smiles"][index]
    image = axes[1].imshow(attn, cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=axes[1], fraction=0.046, pad=0.02)
    name = "last layer" if layer == -1 else f"layer {layer}"
    axes[1].set_title(f"attention of the {name} (mean over heads)\nrows: query atom, columns: key atom", fontsize=9)
    axes[1].set_xlabel("key atom")
    axes[1].set_ylabel("query atom")
    value = model.predict_values(out["logits"])[index, 0].item()
    truth = batch["targets"][index, 0].item()
    _draw_molecule(axes[2], smiles, attn.sum(0),
                   f"{smiles}\nattention received per atom; {names[0]}: predicted {value:.1f}, true {truth:.1f}")
    path = Path(out_dir) / "test_properties.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
