"""Molecules: SMILES -> graphs (RDKit): featurisation, SMILES files, MoleculeNet downloads.

Sources (``MoleculeDataModule(source=...)``):

- ``nci_tpsa`` (default, offline): the 4,999 NCI molecules with their topological polar surface
  area (TPSA, Å²) that RDKit ships: ``<rdkit.RDConfig.RDDataDir>/NCI/first_5k.tpsa.csv``
  (no header, a ``#`` comment line, then ``SMILES,TPSA``).
- ``csv``: your own file: a header row, a SMILES column and one or more target columns, e.g.::

      smiles,logS,active
      CCO,-0.77,1
      c1ccccc1,-1.64,
      CC(=O)O,,0

  ``smiles_column`` and ``target_columns`` name the columns, ``target_kinds`` says
  ``regression`` or ``classification`` (0/1) per target; an empty cell (or ``nan``/``NA``) is a
  missing label, masked out of loss and metrics.
- ``moleculenet``: a MoleculeNet set (``esol``, ``freesolv``, ``lipo``, ``bbbp``, ``bace``, ``hiv``,
  ``tox21``, ``clintox``, ``sider``, ...) downloaded once through
  ``torch_geometric.datasets.MoleculeNet`` into ``<data_dir>/moleculenet/<name>/raw/``; offline,
  a ``ValueError`` names the URL and the file to place there by hand.

A SMILES RDKit cannot parse is counted and reported with its file and line; by default
(``skip_invalid=False``) the run stops with the list, with ``skip_invalid=True`` it goes on
without those molecules (the count is logged and kept in ``datamodule.invalid``).

Atom features (one-hot, :data:`ATOM_FEATURES` wide): element, degree, formal charge, total
hydrogens, hybridisation, CIP chirality (R / S), aromatic, in ring; with ``atom_descriptors=True``
:data:`ATOM_DESCRIPTORS` more columns (:func:`atom_descriptor_values`): the atom's Crippen contributions to logP
and to molar refractivity (Wildman & Crippen 1999, ÷10) and its Gasteiger partial charge, its hydrogens' included.
Bond features (:data:`BOND_FEATURES`): bond type (single/double/triple/aromatic), conjugated, in ring. Both
directions of every bond are edges.
Graph positional encodings (``positional``) are computed once per molecule when the data is
loaded and cached on disk with the graphs.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch

from seqattn.datakit.download import verify_sha256
from seqattn.datakit.files import existing_file, iter_lines, read_table
from seqattn.labels import MISSING_VALUES, split_name
from seqattn.modalities.graph.positional import graph_positional_encoding

log = logging.getLogger(__name__)

ELEMENTS = ("C", "N", "O", "S", "F", "Cl", "Br", "I", "P", "B", "Si", "Se", "Na", "K", "Sn", "As", "Hg")
DEGREES = (0, 1, 2, 3, 4, 5)
CHARGES = (-2, -1, 0, 1, 2)
HYDROGENS = (0, 1, 2, 3, 4)
HYBRIDIZATIONS = ("SP", "SP2", "SP3", "SP3D", "SP3D2")
CHIRALITY = ("R", "S")  # CIP label of a stereocentre
# one-hot groups get one extra "other" slot each; then aromatic, in ring
ATOM_GROUPS = (ELEMENTS, DEGREES, CHARGES, HYDROGENS, HYBRIDIZATIONS, CHIRALITY)
ATOM_FEATURES = sum(len(g) + 1 for g in ATOM_GROUPS) + 2
BOND_TYPES = ("SINGLE", "DOUBLE", "TRIPLE", "AROMATIC")
BOND_FEATURES = len(BOND_TYPES) + 2  # + conjugated, in ring
#: with ``atom_descriptors``: Crippen logP and molar-refractivity contributions, Gasteiger charge
ATOM_DESCRIPTORS = 3
FEATURIZER_VERSION = 2  # 2: + hybridisation, CIP chirality
KINDS = ("regression", "classification")
MISSING = MISSING_VALUES

MOLECULENET = {  # name -> (kind of all targets); columns come from PyG's MoleculeNet.names
    "esol": "regression", "freesolv": "regression", "lipo": "regression",
    "bbbp": "classification", "bace": "classification", "hiv": "classification", "tox21": "classification",
    "clintox": "classification", "sider": "classification", "toxcast": "classification",
    "muv": "classification", "pcba": "classification",
}


def nci_tpsa_path() -> Path:
    """The NCI/TPSA file RDKit ships."""
    from rdkit import RDConfig

    return Path(RDConfig.RDDataDir) / "NCI" / "first_5k.tpsa.csv"


# ----------------------------------------------------------------------------------------------
# featurisation
# ----------------------------------------------------------------------------------------------
def _one_hot(value: Any, choices: Sequence[Any]) -> list[float]:
    out = [0.0] * (len(choices) + 1)
    out[choices.index(value) if value in choices else len(choices)] = 1.0
    return out


def parse_smiles(smiles: str):
    """RDKit molecule or ``None`` when the SMILES does not parse (or has no atoms). RDKit's own
    error messages are silenced; the caller reports the line."""
    from rdkit import Chem, RDLogger

    if not smiles or not smiles.strip():
        return None
    RDLogger.DisableLog("rdApp.*")
    try:
        mol = Chem.MolFromSmiles(smiles.strip())
    finally:
        RDLogger.EnableLog("rdApp.*")
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    return mol


def atom_feature_width(atom_descriptors: bool = False) -> int:
    """Width F of :func:`mol_to_graph`'s ``x``: :data:`ATOM_FEATURES` (+ :data:`ATOM_DESCRIPTORS`)."""
    return ATOM_FEATURES + (ATOM_DESCRIPTORS if atom_descriptors else 0)


def atom_descriptor_values(mol) -> list[list[float]]:
    """Per atom of ``mol`` ``[Crippen logP contribution, Crippen molar-refractivity contribution / 10, Gasteiger
    charge]`` (``[n, ATOM_DESCRIPTORS]``), each with its hydrogens' folded in: computed on the molecule with explicit
    hydrogens, every added hydrogen's value added to its heavy atom's, so that the columns sum to RDKit's ``MolLogP``,
    ``MolMR`` / 10 and (Gasteiger charges) the molecule's formal charge. The charge is clipped to ``[-1, 1]`` and 0
    where RDKit gives none (NaN / inf: atoms outside its parameters)."""
    from rdkit import Chem
    from rdkit.Chem import rdMolDescriptors, rdPartialCharges

    n = mol.GetNumAtoms()
    with_h = Chem.AddHs(mol)  # the heavy atoms keep their indices 0..n-1; added hydrogens follow
    contribs = rdMolDescriptors._CalcCrippenContribs(with_h)  # [(logP, MR)] per atom, in atom order
    rdPartialCharges.ComputeGasteigerCharges(with_h)
    out = [[0.0, 0.0, 0.0] for _ in range(n)]
    for atom in with_h.GetAtoms():
        i = atom.GetIdx()
        owner = i if i < n else atom.GetNeighbors()[0].GetIdx()  # an added hydrogen counts with its heavy atom
        charge = atom.GetDoubleProp("_GasteigerCharge") if atom.HasProp("_GasteigerCharge") else 0.0
        row = out[owner]
        row[0] += contribs[i][0]
        row[1] += contribs[i][1] / 10.0
        row[2] += charge if math.isfinite(charge) else 0.0
    for row in out:
        row[2] = max(-1.0, min(1.0, row[2]))
    return out


def mol_to_graph(mol, atom_descriptors: bool = False) -> dict[str, torch.Tensor]:
    """RDKit molecule -> ``x [n, F]`` (``F = atom_feature_width(atom_descriptors)``), ``edge_index [2, 2m]``
    (both directions), ``edge_attr [2m, BOND_FEATURES]``."""
    atoms = []
    for atom in mol.GetAtoms():
        atoms.append(
            _one_hot(atom.GetSymbol(), ELEMENTS)
            + _one_hot(atom.GetDegree(), DEGREES)
            + _one_hot(atom.GetFormalCharge(), CHARGES)
            + _one_hot(atom.GetTotalNumHs(), HYDROGENS)
            + _one_hot(str(atom.GetHybridization()), HYBRIDIZATIONS)
            + _one_hot(atom.GetProp("_CIPCode") if atom.HasProp("_CIPCode") else None, CHIRALITY)
            + [float(atom.GetIsAromatic()), float(atom.IsInRing())]
        )
    if atom_descriptors:
        atoms = [row + extra for row, extra in zip(atoms, atom_descriptor_values(mol))]
    src, dst, attrs = [], [], []
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        kind = str(bond.GetBondType()).split(".")[-1]
        feat = [float(kind == t) for t in BOND_TYPES] + [float(bond.GetIsConjugated()), float(bond.IsInRing())]
        src += [i, j]
        dst += [j, i]
        attrs += [feat, feat]
    return {
        "x": torch.tensor(atoms, dtype=torch.float32),
        "edge_index": torch.tensor([src, dst], dtype=torch.long).view(2, -1),
        "edge_attr": torch.tensor(attrs, dtype=torch.float32).view(-1, BOND_FEATURES),
    }


TOKENS = ("atoms", "bonds")


def bond_graph(g: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An atom graph (:func:`mol_to_graph`) -> its bond graph (the line graph): one token per bond, edges
    between bonds that share an atom (edge-set attention: Buterez et al. 2024 attend over edges).

    Token of bond ``u–v``: ``[x_u + x_v, bond features]`` (``[m, F + G]``, the order of the atoms does not
    matter); an atom without bonds (a lone ion, methane's one heavy atom) is a token of its own, a bond to
    itself: ``[2 x_a, 0]``. Edge ``b1 -> b2`` for every ordered pair of distinct bonds at a shared atom ``a``,
    its features the shared atom's ``x_a`` (``edge_attr [e, F]``): the attention bias sees which atom joins
    them. Input ``x [n, F]``, ``edge_index [2, 2m]`` (both directions of each bond, consecutive),
    ``edge_attr [2m, G]``; output ``x [m + isolated, F + G]``, ``edge_index [2, e]``, ``edge_attr [e, F]``."""
    x, edge_index, edge_attr = g["x"], g["edge_index"], g["edge_attr"]
    n = x.shape[0]
    u, v = edge_index[0, 0::2], edge_index[1, 0::2]  # [m]: one direction per bond
    if not torch.equal(edge_index[:, 1::2], torch.stack([v, u])):
        raise ValueError("bond_graph expects both directions of every bond as consecutive edges (mol_to_graph's "
                         f"layout), got edge_index {edge_index.tolist()}")
    tokens = [torch.cat([x[u] + x[v], edge_attr[0::2]], dim=1)]  # [m, F + G]
    incident: list[list[int]] = [[] for _ in range(n)]
    for b, (i, j) in enumerate(zip(u.tolist(), v.tolist())):
        incident[i].append(b)
        incident[j].append(b)
    lone = [a for a in range(n) if not incident[a]]
    if lone:
        tokens.append(torch.cat([2 * x[lone], x.new_zeros(len(lone), edge_attr.shape[1])], dim=1))
    src, dst, shared = [], [], []
    for a, at in enumerate(incident):
        for b1 in at:
            for b2 in at:
                if b1 != b2:
                    src.append(b1)
                    dst.append(b2)
                    shared.append(a)
    return {"x": torch.cat(tokens, dim=0),
            "edge_index": torch.tensor([src, dst], dtype=torch.long).view(2, -1),
            "edge_attr": x[shared].view(-1, x.shape[1])}


def smiles_to_graph(smiles: str, atom_descriptors: bool = False) -> dict[str, torch.Tensor] | None:
    """SMILES -> graph dict (see :func:`mol_to_graph`), ``None`` if RDKit cannot parse it."""
    mol = parse_smiles(smiles)
    return None if mol is None else mol_to_graph(mol, atom_descriptors)


def murcko_scaffold(mol) -> str:
    """Bemis–Murcko scaffold SMILES ('' for an acyclic molecule)."""
    from rdkit.Chem.Scaffolds import MurckoScaffold

    return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


# ----------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------
def _parse_target(text: str, kind: str, where: str, column: str) -> float:
    text = text.strip()
    if text in MISSING:
        return float("nan")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: target {column!r} = {text!r} is not a number (leave the cell empty "
                         "for a missing label)") from None
    if kind == "classification" and value not in (0.0, 1.0):
        raise ValueError(f"{where}: classification target {column!r} must be 0 or 1, got {text!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: target {column!r} = {text!r} is not finite")
    return value


def read_smiles_table(
    path: str | Path,
    smiles_column: str = "smiles",
    target_columns: Sequence[str] = (),
    target_kinds: Sequence[str] | None = None,
    header: bool = True,
    names: Sequence[str] | None = None,
    id_column: str | None = None,
    encoding: str = "utf-8",
    split_column: str | None = None,
    skipped: list[tuple[str, str]] | None = None,
    id_optional: bool = False,
) -> list[dict[str, Any]]:
    """Read a SMILES CSV into records ``{smiles, targets [T] (NaN = missing), id, where ("file:line"),
    split}`` (``split``: the row's ``split_column`` value as train/val/test, or None).

    ``header=False`` needs ``names`` (the column names in order). Lines starting with ``#`` and
    empty lines are skipped. A missing column raises ``ValueError`` naming the file and the header;
    a header-only or empty file raises one saying there are no molecules. ``skipped`` (prediction): a
    list to collect malformed rows in (``("file:line", reason)``) instead of raising. ``id_optional``: a
    file without the ``id_column`` names its molecules by their SMILES (logged) instead of raising.
    """
    kinds = list(target_kinds) if target_kinds is not None else ["regression"] * len(target_columns)
    if len(kinds) != len(target_columns):
        raise ValueError(f"target_kinds {kinds} must have one entry per target column {list(target_columns)}")
    if not header and names is None:
        raise ValueError(f"{path}: header=False needs `names` (the column names in order)")
    wanted = [smiles_column, *target_columns] + ([id_column] if id_column and not id_optional else []) \
        + ([split_column] if split_column else [])
    table = read_table(path, "csv", encoding, wanted, "SMILES file", header=None if header else names, comment="#",
                       hint="set data.smiles_column / data.target_columns", skipped=skipped)
    if id_column and id_column not in table.header:  # id_optional
        log.info("%s has no id column %r (data.id_column): its molecules are named by their SMILES", path, id_column)
        id_column = None
    records = []
    for line, values in table.rows:
        where = table.where(line)
        targets = [_parse_target(values[c], k, where, c) for c, k in zip(target_columns, kinds)]
        smiles = values[smiles_column].strip()
        records.append({"smiles": smiles, "targets": targets, "where": where,
                        "id": values[id_column].strip() if id_column else smiles,
                        "split": split_name(values[split_column], where) if split_column else None})
    if not records:
        raise ValueError(f"{table.path}: no molecules (the file has a header and no rows)")
    return records


def read_smiles_lines(path: str | Path, encoding: str = "utf-8") -> list[dict[str, Any]]:
    """A ``.smi`` / ``.txt`` file: one SMILES per line, optionally followed by whitespace and a name."""
    path = existing_file(path, "SMILES file")
    records = []
    for line_no, line in iter_lines(path, encoding, "SMILES file"):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        records.append({"smiles": parts[0], "targets": [], "where": f"{path}:{line_no}",
                        "id": parts[1] if len(parts) > 1 else parts[0]})
    return records


def featurize_records(
    records: Iterable[Mapping[str, Any]],
    skip_invalid: bool = False,
    positional: str = "none",
    pe_dim: int = 8,
    scaffolds: bool = False,
    hint: str = "set data.skip_invalid=true to train without them (they are counted)",
    tokens: str = "atoms",
    atom_descriptors: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Records -> (graphs, invalid "file:line: SMILES" list).

    Each graph: ``x, edge_index, edge_attr`` (+ ``pe [n, pe_dim]``), ``targets [T]``, ``ids``,
    ``smiles`` (+ ``scaffold``); ``tokens="bonds"``: the bond graph (:func:`bond_graph`), its ``pe``
    computed on it; ``atom_descriptors``: :func:`mol_to_graph`'s three descriptor columns too. With
    ``skip_invalid=False`` any invalid SMILES raises a ``ValueError`` listing all of them, ending with ``hint``
    (the calling command's option).
    """
    if tokens not in TOKENS:
        raise ValueError(f"tokens={tokens!r} is not one of {TOKENS}")
    graphs, invalid = [], []
    for rec in records:
        mol = parse_smiles(rec["smiles"])
        if mol is None:
            invalid.append(f"{rec['where']}: {rec['smiles']!r}")
            continue
        g: dict[str, Any] = mol_to_graph(mol, atom_descriptors)
        if tokens == "bonds":
            g = bond_graph(g)
        if positional != "none":
            g["pe"] = graph_positional_encoding(positional, g["edge_index"], g["x"].shape[0], pe_dim)
        g["targets"] = torch.tensor(rec["targets"], dtype=torch.float32)
        g["ids"] = rec["id"]
        g["smiles"] = rec["smiles"]
        if rec.get("split") is not None:
            g["split"] = rec["split"]
        if scaffolds:
            g["scaffold"] = murcko_scaffold(mol)
        graphs.append(g)
    if invalid and not skip_invalid:
        shown = "\n  ".join(invalid[:50])
        more = f"\n  ... and {len(invalid) - 50} more" if len(invalid) > 50 else ""
        raise ValueError(f"{len(invalid)} SMILES could not be parsed by RDKit:\n  {shown}{more}\n"
                         f"Fix them, or {hint}.")
    if invalid:
        log.warning("skipped %d invalid SMILES: %s%s", len(invalid), invalid[:10],
                    " ..." if len(invalid) > 10 else "")
    return graphs, invalid


# ----------------------------------------------------------------------------------------------
# MoleculeNet (public)
# ----------------------------------------------------------------------------------------------
def moleculenet_csv(name: str, root: Path) -> tuple[Path, str, list[str]]:
    """Download (once) a MoleculeNet CSV through PyG; returns ``(csv path, smiles column, target columns)``.

    The SHA-256 of the file is recorded next to it at the first download and checked on every
    later use (a changed or truncated file is reported).
    """
    from torch_geometric.datasets import MoleculeNet

    key = name.lower()
    if key not in MoleculeNet.names:
        raise ValueError(f"unknown MoleculeNet set {name!r}; expected one of {sorted(MoleculeNet.names)}")
    _, url_name, csv_name, smiles_idx, y_idx = MoleculeNet.names[key]
    raw = root / key / "raw" / f"{csv_name}.csv"
    if not raw.is_file():
        try:
            MoleculeNet(str(root), key)
        except Exception as err:  # URLError, socket errors, HTTP errors
            url = MoleculeNet.url.format(url_name)
            raise ValueError(
                f"could not download MoleculeNet {name!r} from {url} ({type(err).__name__}: {err}). Offline? "
                f"Place the file there by hand: {raw}" + (" (gunzip it first)" if url_name.endswith(".gz") else "")
            ) from err
    verify_sha256(raw)  # recorded at the first download, checked on every later use
    with open(raw, newline="") as fh:
        header = next(csv.reader(fh))
    targets = header[y_idx] if isinstance(y_idx, slice) else [header[y_idx]]
    return raw, header[smiles_idx], list(targets)


