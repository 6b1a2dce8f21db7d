"""Molecules on real data: FreeSolv and Lipophilicity, the molecule recipe vs PyG ``AttentiveFP``.

Each seed is one recipe run through the command a user types (the custom-data path of
``tasks/molecule/README.md``)::

    python -m seqattn.run task=molecule data.path=<data>/molecules/freesolv.csv data.target_columns=[expt] seed=<s>

and, in the same case, a PyG :class:`~torch_geometric.nn.models.AttentiveFP` trained on **the
same train / val / test molecules**. The split is not re-implemented here: the run's own resolved
``config.yaml`` (written by ``seqattn.run``) is read back, its ``data`` section instantiated (the
recipe's ``MoleculeDataModule``, same file, seed, fractions, limit) and ``setup()`` gives the
three splits; the case then checks that this is the split the run used: the trivial baseline
(training mean for every test molecule) computed on the reproduced split must equal the run's
``test/baseline_rmse_<target>`` in ``metrics.json`` -- a different training set or test set
would change it. A mismatch raises.

The reference (:func:`train_attentivefp`) follows the PyG example ``examples/attentive_fp.py``
(itself the settings of Xiong et al. 2019): the AttentiveFP paper's atom and bond features
(:func:`attentivefp_graph`: 39 per atom, 10 per bond, computed from the SMILES with RDKit -- the
paper's Table 1, not seqattn's featurisation), ``hidden_channels=200, num_layers=2,
num_timesteps=2, dropout=0.2``, Adam ``lr=10**-2.5, weight_decay=10**-5``, batch 200; plus what
the example leaves out and a fair comparison needs: targets standardised with the training
mean / std, at most 200 epochs, the weights of the best validation RMSE, early stopping after 50
epochs without improvement.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from seqattn.bench.real import Context, Result, command_line, run_recipe

#: case -> (file under <data>/molecules, target column, default seeds)
DATASETS = {
    "freesolv": ("freesolv.csv", "expt", 5),
    "lipophilicity": ("lipophilicity.csv", "target", 3),
}


# ----------------------------------------------------------------------------------------------
# the reference: AttentiveFP with the paper's features
# ----------------------------------------------------------------------------------------------
_SYMBOLS = ("B", "C", "N", "O", "F", "Si", "P", "S", "Cl", "As", "Se", "Br", "Te", "I", "At")  # + other
AFP_ATOM_FEATURES = 39
AFP_BOND_FEATURES = 10


def _one_hot(value: Any, choices: Sequence[Any], other: bool = True) -> list[float]:
    out = [0.0] * (len(choices) + int(other))
    if value in choices:
        out[list(choices).index(value)] = 1.0
    elif other:
        out[-1] = 1.0
    return out


def attentivefp_graph(smiles: str, extra: torch.Tensor | None = None):
    """SMILES -> ``torch_geometric.data.Data(x [n, 39], edge_index [2, 2m], edge_attr [2m, 10])``
    with the AttentiveFP paper's features (Table 1, as in PyG's ``examples/attentive_fp.py``):
    atom symbol (15 + other), degree (0-5), formal charge, radical electrons, hybridisation
    (sp, sp2, sp3, sp3d, sp3d2, other), aromatic, total H (0-4), chirality possible, R/S;
    bond type (4), conjugated, in ring, stereo (none, any, Z, E). ``extra [n, K]``: more atom columns appended
    (``x [n, 39 + K]``, same atom order): the recipe run's atom descriptors, read from its own data
    (:func:`recipe_splits`), so that both sides of the bench see the same chemistry."""
    from rdkit import Chem
    from torch_geometric.data import Data

    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot parse the SMILES {smiles!r}")
    hybrid = (Chem.rdchem.HybridizationType.SP, Chem.rdchem.HybridizationType.SP2,
              Chem.rdchem.HybridizationType.SP3, Chem.rdchem.HybridizationType.SP3D,
              Chem.rdchem.HybridizationType.SP3D2)
    stereo = (Chem.rdchem.BondStereo.STEREONONE, Chem.rdchem.BondStereo.STEREOANY,
              Chem.rdchem.BondStereo.STEREOZ, Chem.rdchem.BondStereo.STEREOE)
    xs = []
    for atom in mol.GetAtoms():
        cip = [0.0, 0.0]
        if atom.HasProp("_CIPCode") and atom.GetProp("_CIPCode") in ("R", "S"):
            cip[("R", "S").index(atom.GetProp("_CIPCode"))] = 1.0
        xs.append(_one_hot(atom.GetSymbol(), _SYMBOLS) + _one_hot(atom.GetDegree(), range(6), other=False)
                  + [float(atom.GetFormalCharge()), float(atom.GetNumRadicalElectrons())]
                  + _one_hot(atom.GetHybridization(), hybrid) + [float(atom.GetIsAromatic())]
                  + _one_hot(atom.GetTotalNumHs(), range(5), other=False)
                  + [float(atom.HasProp("_ChiralityPossible"))] + cip)
    index, attrs = [], []
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        kind = bond.GetBondType()
        feat = [float(kind == t) for t in (Chem.rdchem.BondType.SINGLE, Chem.rdchem.BondType.DOUBLE,
                                           Chem.rdchem.BondType.TRIPLE, Chem.rdchem.BondType.AROMATIC)]
        feat += [float(bond.GetIsConjugated()), float(bond.IsInRing())] + _one_hot(bond.GetStereo(), stereo, False)
        index += [[i, j], [j, i]]
        attrs += [feat, feat]
    x = torch.tensor(xs, dtype=torch.float32).view(-1, AFP_ATOM_FEATURES)
    if extra is not None:
        if extra.dim() != 2 or extra.shape[0] != x.shape[0]:
            raise ValueError(f"extra atom columns for {smiles!r} must be [{x.shape[0]} atoms, K], got "
                             f"{tuple(extra.shape)}")
        x = torch.cat([x, extra.to(torch.float32)], dim=1)  # [n, 39 + K]
    edge_index = torch.tensor(index, dtype=torch.long).view(-1, 2).t().contiguous()
    edge_attr = torch.tensor(attrs, dtype=torch.float32).view(-1, AFP_BOND_FEATURES)
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr)


@dataclass
class AttentiveFPSettings:
    """The reference's settings (PyG ``examples/attentive_fp.py``), plus early stopping on val."""

    hidden: int = 200
    layers: int = 2
    timesteps: int = 2
    dropout: float = 0.2
    lr: float = 10 ** -2.5
    weight_decay: float = 10 ** -5
    batch_size: int = 200
    max_epochs: int = 200
    patience: int = 50


def train_attentivefp(splits: dict[str, list[tuple[str, float]]], seed: int,
                      settings: AttentiveFPSettings | None = None,
                      extra: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
    """Train AttentiveFP on ``splits`` (``{"train"|"val"|"test": [(smiles, target), ...]}``; the
    target in original units) and return ``{"test_rmse", "val_rmse", "epochs", "best_epoch", "seconds"}``:
    the test RMSE (original units) of the weights with the best validation RMSE. ``extra``: SMILES -> more atom
    columns ``[n, K]`` for every molecule (:func:`attentivefp_graph`), e.g. the recipe run's atom descriptors."""
    from torch_geometric.loader import DataLoader
    from torch_geometric.nn.models import AttentiveFP

    s = settings or AttentiveFPSettings()
    start = time.perf_counter()
    torch.manual_seed(seed)
    train_y = torch.tensor([y for _, y in splits["train"]], dtype=torch.float32)
    mean, std = float(train_y.mean()), float(train_y.std()) if len(train_y) > 1 else 1.0
    std = std if std > 1e-8 else 1.0

    def dataset(part: str) -> list:
        out = []
        for smiles, y in splits[part]:
            g = attentivefp_graph(smiles, None if extra is None else extra[smiles])
            g.y = torch.tensor([[(y - mean) / std]], dtype=torch.float32)
            out.append(g)
        return out

    data = {part: dataset(part) for part in ("train", "val", "test")}
    generator = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(data["train"], batch_size=s.batch_size, shuffle=True, generator=generator)
    loaders = {p: DataLoader(data[p], batch_size=s.batch_size) for p in ("val", "test")}
    width = AFP_ATOM_FEATURES + (next(iter(extra.values())).shape[1] if extra else 0)
    model = AttentiveFP(in_channels=width, hidden_channels=s.hidden, out_channels=1,
                        edge_dim=AFP_BOND_FEATURES, num_layers=s.layers, num_timesteps=s.timesteps,
                        dropout=s.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=s.lr, weight_decay=s.weight_decay)

    @torch.no_grad()
    def rmse(loader) -> float:
        model.eval()
        sq, n = 0.0, 0
        for batch in loader:
            out = model(batch.x, batch.edge_index, batch.edge_attr, batch.batch)
            sq += float(((out - batch.y) * std).pow(2).sum())
            n += batch.y.numel()
        return math.sqrt(sq / max(n, 1))

    best, best_state, best_epoch, epoch = float("inf"), None, 0, 0
    for epoch in range(1, s.max_epochs + 1):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index, batch.edge_attr, batch.batch)
            torch.nn.functional.mse_loss(out, batch.y).backward()
            optimizer.step()
        val = rmse(loaders["val"])
        if val < best:
            best, best_epoch, best_state = val, epoch, copy.deepcopy(model.state_dict())
        elif epoch - best_epoch >= s.patience:
            break
    model.load_state_dict(best_state)
    return {"test_rmse": rmse(loaders["test"]), "val_rmse": best, "epochs": epoch, "best_epoch": best_epoch,
            "seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------------------------
# the split the recipe used
# ----------------------------------------------------------------------------------------------
def recipe_splits(run_dir: Path, target: str,
                  extra: dict[str, torch.Tensor] | None = None) -> dict[str, list[tuple[str, float]]]:
    """The train / val / test molecules of a finished ``seqattn.run`` in ``run_dir``, as
    ``{split: [(smiles, target value), ...]}``, reproduced from the run's own ``config.yaml`` (the
    recipe's DataModule with the run's data settings and seed) and checked against the run:
    ``test/baseline_rmse_<target>`` of its ``metrics.json`` (the training mean scored on the test
    split) must come out the same on the reproduced split. Molecules without a label are left out. ``extra``, a
    dict, receives SMILES -> the atom columns the run added to the paper's kind of features
    (``datamodule.atom_descriptor_columns()``: its atom descriptors, ``[n, K]``), when it added any."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(run_dir / "config.yaml")
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    column = list(datamodule.target_columns).index(target)
    columns = datamodule.atom_descriptor_columns()  # a slice of x, or None
    splits = {}
    for part in ("train", "val", "test"):
        graphs = datamodule.datasets[part].graphs
        splits[part] = [(g["smiles"], float(g["targets"][column])) for g in graphs
                        if not math.isnan(float(g["targets"][column]))]
        if extra is not None and columns is not None:
            extra.update((g["smiles"], g["x"][:, columns]) for g in graphs)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    key = f"test/baseline_rmse_{re.sub(r'[^0-9A-Za-z_-]', '_', target)}"
    mean = sum(y for _, y in splits["train"]) / len(splits["train"])
    baseline = math.sqrt(sum((y - mean) ** 2 for _, y in splits["test"]) / len(splits["test"]))
    if key not in metrics or not math.isclose(baseline, float(metrics[key]), rel_tol=1e-4, abs_tol=1e-5):
        raise RuntimeError(f"the split reproduced from {run_dir / 'config.yaml'} is not the run's: the training "
                           f"mean on its test split gives RMSE {baseline:.6f}, the run reported "
                           f"{key}={metrics.get(key)}")
    if not math.isclose(mean, float(datamodule.target_mean[column]), rel_tol=1e-5, abs_tol=1e-6):
        raise RuntimeError(f"training mean {mean} != the DataModule's {datamodule.target_mean[column]}")
    return splits


# ----------------------------------------------------------------------------------------------
# the cases
# ----------------------------------------------------------------------------------------------
def recipe_overrides(data: Path, name: str) -> list[str]:
    """The user's command for a dataset of :data:`DATASETS` (without the seed)."""
    file, target, _ = DATASETS[name]
    return ["task=molecule", f"data.path={data / 'molecules' / file}", f"data.target_columns=[{target}]"]


def molecule_case(ctx: Context, name: str, settings: AttentiveFPSettings | None = None) -> Result:
    """One dataset of :data:`DATASETS`: ``ctx.seeds`` (default: the dataset's) recipe runs and as many
    AttentiveFP runs on the same splits."""
    file, target, default_seeds = DATASETS[name]
    path = ctx.data / "molecules" / file
    if not path.is_file():
        raise FileNotFoundError(f"no {path}")
    base = recipe_overrides(ctx.data, name)
    seeds = ctx.seed_list(ctx.choose(default_seeds, 1))
    if ctx.quick:  # --quick: a tenth of the recipe's steps, 20 reference epochs
        base = [*base, "budget.steps=500", "budget.min_epochs=1"]  # a tenth of the steps, no epoch floor
        settings = dataclasses.replace(settings or AttentiveFPSettings(), max_epochs=20)
    key = f"test/rmse_{target}"
    ours, theirs, our_s, their_s, notes = [], [], [], [], []
    for seed in seeds:
        run_dir = ctx.work / f"seed{seed}"
        metrics, seconds = run_recipe([*base, f"seed={seed}", *ctx.extra], run_dir)
        ctx.runs.append((metrics, seconds))
        ours.append(float(metrics[key]))
        our_s.append(seconds)
        extra: dict = {}  # the recipe's atom descriptors, when the run has them: the same chemistry on both sides
        splits = recipe_splits(run_dir, target, extra)
        descriptors = bool(extra)
        ref = train_attentivefp(splits, seed, settings, extra if descriptors else None)
        theirs.append(ref["test_rmse"])
        their_s.append(ref["seconds"])
        ctx.log(f"{name} seed {seed}: seqattn {ours[-1]:.4f} ({metrics.get('epochs')} epochs, {seconds:.0f} s), "
                f"AttentiveFP {ref['test_rmse']:.4f} (best epoch {ref['best_epoch']}/{ref['epochs']}, "
                f"{ref['seconds']:.0f} s); split {len(splits['train'])}/{len(splits['val'])}/{len(splits['test'])}")
        notes.append(f"{len(splits['test'])}")
    return Result(dataset=f"{name} ({file}, random 80/10/10)", metric=f"test RMSE ({target})", lower_is_better=True,
                  seqattn=ours, reference=theirs, reference_name="PyG AttentiveFP",
                  seqattn_seconds=our_s, reference_seconds=their_s,
                  command=command_line([*base, "seed=<s>", *ctx.extra]),
                  notes=ctx.choose("", "QUICK: budget.steps=500 budget.min_epochs=1, AttentiveFP 20 epochs; ") + f"{ctx.seed_label(seeds)}; test molecules per seed: {', '.join(notes)}; AttentiveFP on the "
                        "same split, paper features" + (" + the recipe's atom descriptors" if descriptors else "")
                        + ", PyG example settings + best-val epoch",
                  reference_imports=("torch", "rdkit.Chem", "torch_geometric.loader", "torch_geometric.nn.models"))


def case_freesolv(ctx: Context) -> Result:
    return molecule_case(ctx, "freesolv")


def case_lipophilicity(ctx: Context) -> Result:
    return molecule_case(ctx, "lipophilicity")
