"""Molecules: SMILES -> graphs (RDKit) -> property prediction batches.

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
hydrogens, aromatic, in ring. Bond features (:data:`BOND_FEATURES`): bond type
(single/double/triple/aromatic), conjugated, in ring. Both directions of every bond are edges.
Graph positional encodings (``positional``) are computed once per molecule when the data is
loaded and cached on disk with the graphs.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import os
import random
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from seqattn.adapters.graph import GRAPH_POSITIONALS, collate_graphs, graph_positional_encoding
from seqattn.data.base import SplitDataModule

log = logging.getLogger(__name__)

ELEMENTS = ("C", "N", "O", "S", "F", "Cl", "Br", "I", "P", "B", "Si", "Se", "Na", "K", "Sn", "As", "Hg")
DEGREES = (0, 1, 2, 3, 4, 5)
CHARGES = (-2, -1, 0, 1, 2)
HYDROGENS = (0, 1, 2, 3, 4)
# one-hot groups get one extra "other" slot each; then aromatic, in ring
ATOM_FEATURES = sum(len(g) + 1 for g in (ELEMENTS, DEGREES, CHARGES, HYDROGENS)) + 2
BOND_TYPES = ("SINGLE", "DOUBLE", "TRIPLE", "AROMATIC")
BOND_FEATURES = len(BOND_TYPES) + 2  # + conjugated, in ring
FEATURIZER_VERSION = 1
KINDS = ("regression", "classification")
MISSING = {"", "nan", "NaN", "NA", "N/A", "na", "null", "None"}

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


def mol_to_graph(mol) -> dict[str, torch.Tensor]:
    """RDKit molecule -> ``x [n, ATOM_FEATURES]``, ``edge_index [2, 2m]`` (both directions),
    ``edge_attr [2m, BOND_FEATURES]``."""
    atoms = []
    for atom in mol.GetAtoms():
        atoms.append(
            _one_hot(atom.GetSymbol(), ELEMENTS)
            + _one_hot(atom.GetDegree(), DEGREES)
            + _one_hot(atom.GetFormalCharge(), CHARGES)
            + _one_hot(atom.GetTotalNumHs(), HYDROGENS)
            + [float(atom.GetIsAromatic()), float(atom.IsInRing())]
        )
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


def smiles_to_graph(smiles: str) -> dict[str, torch.Tensor] | None:
    """SMILES -> graph dict (see :func:`mol_to_graph`), ``None`` if RDKit cannot parse it."""
    mol = parse_smiles(smiles)
    return None if mol is None else mol_to_graph(mol)


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
) -> list[dict[str, Any]]:
    """Read a SMILES CSV into records ``{smiles, targets [T] (NaN = missing), id, where ("file:line")}``.

    ``header=False`` needs ``names`` (the column names in order). Lines starting with ``#`` and
    empty lines are skipped. Unknown columns -> ``ValueError`` naming the file and the columns.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"SMILES file {path} does not exist")
    kinds = list(target_kinds) if target_kinds is not None else ["regression"] * len(target_columns)
    if len(kinds) != len(target_columns):
        raise ValueError(f"target_kinds {kinds} must have one entry per target column {list(target_columns)}")
    records = []
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = csv.reader(fh)
        columns = list(names) if names is not None else None
        for row in rows:
            line = rows.line_num
            if not row or (len(row) == 1 and not row[0].strip()) or row[0].lstrip().startswith("#"):
                continue
            if columns is None:
                if not header:
                    raise ValueError(f"{path}: header=False needs `names` (the column names in order)")
                columns = [c.strip() for c in row]
                wanted = [smiles_column, *target_columns] + ([id_column] if id_column else [])
                missing = [c for c in wanted if c not in columns]
                if missing:
                    raise ValueError(f"{path}:{line}: column(s) {missing} not in the header {columns} "
                                     "(set data.smiles_column / data.target_columns)")
                continue
            where = f"{path}:{line}"
            if len(row) != len(columns):
                raise ValueError(f"{where}: {len(row)} fields, the header has {len(columns)} ({columns})")
            values = dict(zip(columns, row))
            targets = [_parse_target(values[c], k, where, c) for c, k in zip(target_columns, kinds)]
            smiles = values[smiles_column].strip()
            records.append({"smiles": smiles, "targets": targets, "where": where,
                            "id": values[id_column].strip() if id_column else smiles})
    return records


def read_smiles_lines(path: str | Path) -> list[dict[str, Any]]:
    """A ``.smi`` / ``.txt`` file: one SMILES per line, optionally followed by whitespace and a name."""
    path = Path(path).expanduser()
    records = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
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
) -> tuple[list[dict[str, Any]], list[str]]:
    """Records -> (graphs, invalid "file:line: SMILES" list).

    Each graph: ``x, edge_index, edge_attr`` (+ ``pe [n, pe_dim]``), ``targets [T]``, ``ids``,
    ``smiles`` (+ ``scaffold``). With ``skip_invalid=False`` any invalid SMILES raises a
    ``ValueError`` listing all of them.
    """
    graphs, invalid = [], []
    for rec in records:
        mol = parse_smiles(rec["smiles"])
        if mol is None:
            invalid.append(f"{rec['where']}: {rec['smiles']!r}")
            continue
        g: dict[str, Any] = mol_to_graph(mol)
        if positional != "none":
            g["pe"] = graph_positional_encoding(positional, g["edge_index"], g["x"].shape[0], pe_dim)
        g["targets"] = torch.tensor(rec["targets"], dtype=torch.float32)
        g["ids"] = rec["id"]
        g["smiles"] = rec["smiles"]
        if scaffolds:
            g["scaffold"] = murcko_scaffold(mol)
        graphs.append(g)
    if invalid and not skip_invalid:
        shown = "\n  ".join(invalid[:50])
        more = f"\n  ... and {len(invalid) - 50} more" if len(invalid) > 50 else ""
        raise ValueError(f"{len(invalid)} SMILES could not be parsed by RDKit:\n  {shown}{more}\n"
                         "Fix them, or set data.skip_invalid=true to train without them (they are counted).")
    if invalid:
        log.warning("skipped %d invalid SMILES (skip_invalid=true): %s%s", len(invalid), invalid[:10],
                    " ..." if len(invalid) > 10 else "")
    return graphs, invalid


# ----------------------------------------------------------------------------------------------
# splits
# ----------------------------------------------------------------------------------------------
def random_split(n: int, val_fraction: float, test_fraction: float, seed: int) -> dict[str, list[int]]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_test, n_val = int(round(n * test_fraction)), int(round(n * val_fraction))
    return {"test": order[:n_test], "val": order[n_test: n_test + n_val], "train": order[n_test + n_val:]}


def scaffold_split(scaffolds: Sequence[str], val_fraction: float, test_fraction: float) -> dict[str, list[int]]:
    """Bemis–Murcko scaffold split: molecules sharing a scaffold stay in one split. Scaffold groups,
    largest first (ties by scaffold), fill train, then val, then test — test holds the rarest scaffolds."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(scaffolds):
        groups[s].append(i)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    n = len(scaffolds)
    train_cap, val_cap = n * (1 - val_fraction - test_fraction), n * (1 - test_fraction)
    out: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for _, idx in ordered:
        if len(out["train"]) + len(idx) <= train_cap:
            out["train"] += idx
        elif len(out["train"]) + len(out["val"]) + len(idx) <= val_cap:
            out["val"] += idx
        else:
            out["test"] += idx
    return out


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
    digest = hashlib.sha256(raw.read_bytes()).hexdigest()
    stamp = raw.with_suffix(".sha256")
    if stamp.is_file() and stamp.read_text().strip() != digest:
        raise ValueError(f"{raw} changed since it was first downloaded (sha256 {digest} != {stamp.read_text()}); "
                         "delete it and its .sha256 to download again")
    if not stamp.is_file():
        stamp.write_text(digest)
    with open(raw, newline="") as fh:
        header = next(csv.reader(fh))
    targets = header[y_idx] if isinstance(y_idx, slice) else [header[y_idx]]
    return raw, header[smiles_idx], list(targets)


# ----------------------------------------------------------------------------------------------
# dataset and datamodule
# ----------------------------------------------------------------------------------------------
_PACKED = ("x", "edge_index", "edge_attr", "pe", "targets")


def pack_graphs(graphs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A list of graph dicts -> a few concatenated tensors + offsets (fast to save and load)."""
    out: dict[str, Any] = {}
    for key in _PACKED:
        if key in graphs[0]:
            dim = 1 if key == "edge_index" else 0
            out[key] = torch.cat([g[key] for g in graphs], dim=dim)
            out[key + "_len"] = torch.tensor([g[key].shape[dim] for g in graphs])
    for key in graphs[0]:
        if key not in _PACKED:
            out[key] = [g[key] for g in graphs]
    return out


def unpack_graphs(packed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Inverse of :func:`pack_graphs`."""
    pieces: dict[str, list] = {}
    for key in _PACKED:
        if key in packed:
            dim = 1 if key == "edge_index" else 0
            pieces[key] = list(torch.split(packed[key], packed[key + "_len"].tolist(), dim=dim))
    lists = {k: v for k, v in packed.items() if k not in _PACKED and not k.endswith("_len")}
    n = len(next(iter(pieces.values())))
    return [{**{k: v[i] for k, v in pieces.items()}, **{k: v[i] for k, v in lists.items()}} for i in range(n)]


class GraphListDataset(Dataset):
    """A list of featurised graphs (dicts for :func:`~seqattn.adapters.graph.collate_graphs`)."""

    def __init__(self, graphs: Sequence[dict[str, Any]]) -> None:
        self.graphs = list(graphs)

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        g = self.graphs[index]
        return {k: v for k, v in g.items() if k != "scaffold"}


def collate_molecules(graphs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``collate_graphs`` plus ``targets [B, T]`` (NaN = missing), ``ids`` and ``smiles`` lists."""
    batch = collate_graphs(graphs)
    if "targets" in batch and isinstance(batch["targets"], list):  # T = 0 (prediction input)
        batch.pop("targets")
    return batch


class MoleculeDataModule(SplitDataModule):
    """Molecule property data: SMILES -> graphs, splits, loaders, and the predict protocol.

    Batches (``collate_molecules``): ``x [B, N, ATOM_FEATURES]``, ``mask [B, N]``, ``edge_index [2, E]``,
    ``edge_attr [E, BOND_FEATURES]``, ``pe [B, N, pe_dim]`` (when ``positional != none``),
    ``targets [B, T]`` (NaN = missing), ``ids``, ``smiles``.

    Args:
        source: ``nci_tpsa`` | ``csv`` | ``moleculenet``.
        path: the CSV for ``source=csv``.
        smiles_column, target_columns, target_kinds: the CSV's columns (``target_kinds`` one for all
            or one per column); ``moleculenet`` fills them from the set.
        id_column: optional column with molecule ids (default: the SMILES).
        moleculenet: the set's name for ``source=moleculenet``.
        split: ``random`` | ``scaffold`` (Bemis–Murcko).
        skip_invalid: go on without unparsable SMILES (counted, logged with file:line) instead of
            stopping with the list. ``None``: stop for your files (``csv``, ``moleculenet``); skip for the
            built-in ``nci_tpsa`` file, which holds 8 SMILES RDKit rejects (hypervalent Al/Be/Si/P/Hg).
        positional, pe_dim: graph positional encoding computed once per molecule.
        limit: use only the first ``limit`` molecules of the file (quick runs).
    """

    collate = staticmethod(collate_molecules)

    def __init__(
        self,
        source: str = "nci_tpsa",
        path: str | None = None,
        smiles_column: str = "smiles",
        target_columns: Sequence[str] | None = None,
        target_kinds: str | Sequence[str] = "regression",
        id_column: str | None = None,
        moleculenet: str | None = None,
        split: str = "random",
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        skip_invalid: bool | None = None,
        positional: str = "none",
        pe_dim: int = 8,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
        data_dir: str | None = None,
        limit: int | None = None,
        cache: bool = True,
    ) -> None:
        super().__init__()
        if source not in ("nci_tpsa", "csv", "moleculenet"):
            raise ValueError(f"source={source!r} is not one of ('nci_tpsa', 'csv', 'moleculenet')")
        if source == "csv" and not path:
            raise ValueError("source='csv' needs path=<your SMILES CSV>")
        if source == "moleculenet" and not moleculenet:
            raise ValueError(f"source='moleculenet' needs moleculenet=<one of {sorted(MOLECULENET)}>")
        if split not in ("random", "scaffold"):
            raise ValueError(f"split={split!r} is not one of ('random', 'scaffold')")
        if positional not in GRAPH_POSITIONALS:
            raise ValueError(f"positional={positional!r} is not one of {GRAPH_POSITIONALS}")
        if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError(f"val_fraction={val_fraction} and test_fraction={test_fraction} must be in [0, 1) "
                             "and leave training data")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if limit is not None and limit <= 0:
            raise ValueError(f"limit must be a positive number of molecules or None, got {limit}")
        self.source, self.path, self.moleculenet = source, path, moleculenet
        self.smiles_column, self.id_column = smiles_column, id_column
        if source == "nci_tpsa":
            target_columns = target_columns or ["tpsa"]
            target_kinds = "regression"
        elif source == "csv" and not target_columns:
            raise ValueError("source='csv' needs target_columns=[...] (the property column names)")
        self.target_columns = list(target_columns or [])
        self._kinds_arg = target_kinds
        self.split, self.val_fraction, self.test_fraction = split, val_fraction, test_fraction
        self.skip_invalid_predict = bool(skip_invalid)  # the user's own predict input: skip only when told
        if skip_invalid is None:
            skip_invalid = source == "nci_tpsa"
        self.skip_invalid, self.positional, self.pe_dim = bool(skip_invalid), positional, pe_dim
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.data_dir = Path(data_dir or os.environ.get("SEQATTN_DATA_DIR", "~/.cache/seqattn")).expanduser()
        self.limit, self.cache = limit, cache
        self.datasets: dict[str, GraphListDataset] = {}
        self.invalid: list[str] = []
        self.target_mean: list[float] | None = None
        self.target_std: list[float] | None = None

    # -- what the model needs -------------------------------------------------------------------
    node_features = ATOM_FEATURES
    edge_features = BOND_FEATURES

    @property
    def target_kinds(self) -> list[str]:
        kinds = self._kinds_arg
        kinds = [kinds] * len(self.target_columns) if isinstance(kinds, str) else list(kinds)
        if len(kinds) != len(self.target_columns) or any(k not in KINDS for k in kinds):
            raise ValueError(f"target_kinds must be one of {KINDS} or one per target column "
                             f"{self.target_columns}, got {self._kinds_arg!r}")
        return kinds

    @property
    def label_names(self) -> list[str]:
        return list(self.target_columns)

    @property
    def num_outputs(self) -> int:
        return len(self.target_columns)

    def model_overrides(self) -> dict[str, dict[str, Any]]:
        if self.target_mean is None:
            raise RuntimeError("model_overrides() needs setup() (target statistics come from the train split)")
        return {
            "adapter": {"node_features": ATOM_FEATURES, "edge_features": BOND_FEATURES,
                        "positional": self.positional, "pe_dim": self.pe_dim},
            "objective": {"target_kinds": self.target_kinds, "target_mean": self.target_mean,
                          "target_std": self.target_std},
        }

    # -- lifecycle ------------------------------------------------------------------------------
    def _records(self) -> list[dict[str, Any]]:
        if self.source == "nci_tpsa":
            return read_smiles_table(nci_tpsa_path(), "smiles", ["tpsa"], ["regression"], header=False,
                                     names=["smiles", "tpsa"])
        if self.source == "moleculenet":
            raw, smiles_col, targets = moleculenet_csv(self.moleculenet, self.data_dir / "moleculenet")
            self.smiles_column = smiles_col
            if not self.target_columns:
                self.target_columns = targets
                self._kinds_arg = MOLECULENET.get(self.moleculenet.lower(), "classification")
            return read_smiles_table(raw, smiles_col, self.target_columns, self.target_kinds, id_column=self.id_column)
        return read_smiles_table(self.path, self.smiles_column, self.target_columns, self.target_kinds,
                                 id_column=self.id_column)

    def _source_file(self) -> Path:
        if self.source == "nci_tpsa":
            return nci_tpsa_path()
        return Path(self.path).expanduser()

    def _cache_path(self) -> Path | None:
        if not self.cache or self.source == "moleculenet":
            return None
        src = self._source_file()
        stat = src.stat()
        key = json.dumps([str(src.resolve()), stat.st_size, stat.st_mtime_ns, self.smiles_column, self.target_columns,
                          self.target_kinds, self.id_column, self.positional, self.pe_dim, self.skip_invalid,
                          self.split, self.limit, FEATURIZER_VERSION])
        return self.data_dir / "molecules" / f"{hashlib.sha1(key.encode()).hexdigest()[:16]}.pt"

    def _load_graphs(self) -> list[dict[str, Any]]:
        cache = self._cache_path()
        if cache is not None and cache.is_file():
            saved = torch.load(cache, weights_only=False)
            self.invalid = saved["invalid"]
            graphs = unpack_graphs(saved["packed"])
            if self.invalid:
                log.warning("%d invalid SMILES were skipped (skip_invalid=true): %s", len(self.invalid),
                            self.invalid[:10])
            log.info("molecule graphs from the cache %s", cache)
            return graphs
        records = self._records()
        if self.limit is not None:
            records = records[: self.limit]
        graphs, self.invalid = featurize_records(records, self.skip_invalid, self.positional, self.pe_dim,
                                                 scaffolds=self.split == "scaffold")
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".tmp{os.getpid()}")
            torch.save({"packed": pack_graphs(graphs), "invalid": self.invalid}, tmp)
            os.replace(tmp, cache)  # atomic
        return graphs

    def prepare_data(self) -> None:
        if self.source == "moleculenet":
            moleculenet_csv(self.moleculenet, self.data_dir / "moleculenet")

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        graphs = self._load_graphs()
        if not graphs:
            raise ValueError(f"no molecules to train on from source={self.source!r}")
        if self.split == "scaffold":
            parts = scaffold_split([g["scaffold"] for g in graphs], self.val_fraction, self.test_fraction)
        else:
            parts = random_split(len(graphs), self.val_fraction, self.test_fraction, self.seed)
        for name, idx in parts.items():
            self.datasets[name] = GraphListDataset([graphs[i] for i in idx])
        train_y = torch.stack([g["targets"] for g in self.datasets["train"].graphs])  # [n, T]
        mean, std = [], []
        for t, kind in enumerate(self.target_kinds):
            col = train_y[:, t][~torch.isnan(train_y[:, t])]
            if col.numel() == 0:
                raise ValueError(f"target {self.target_columns[t]!r} has no label in the training split")
            if kind == "regression":
                mean.append(float(col.mean()))
                s = float(col.std()) if col.numel() > 1 else 1.0
                std.append(s if s > 1e-8 else 1.0)
            else:
                mean.append(0.0)
                std.append(1.0)
        self.target_mean, self.target_std = mean, std
        log.info("molecules (%s, %s split): %s; invalid SMILES skipped: %d; targets %s", self.source, self.split,
                 {k: len(v) for k, v in self.datasets.items()}, len(self.invalid), self.target_columns)

    # -- predict protocol -----------------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of molecules to predict: a CSV with a header and the ``smiles_column`` (and
        ``id_column`` if configured; other columns are ignored), or a ``.smi`` / ``.txt`` file with one
        SMILES (and an optional name) per line. Invalid SMILES stop with the list unless
        ``skip_invalid=true`` was set explicitly. Works without ``setup()``."""
        path = Path(source).expanduser()
        if not path.is_file():
            raise ValueError(f"predict input {path} is not a file (expected a SMILES .csv, .smi or .txt)")
        if path.suffix.lower() in (".smi", ".txt"):
            records = read_smiles_lines(path)
        else:
            records = read_smiles_table(path, self.smiles_column, (), id_column=self.id_column)
        graphs, invalid = featurize_records(records, self.skip_invalid_predict, self.positional, self.pe_dim)
        if not graphs:
            raise ValueError(f"{path}: no valid SMILES to predict (invalid: {invalid[:10]})")
        for g in graphs:
            g.pop("targets")
        return DataLoader(GraphListDataset(graphs), batch_size=batch_size or self.batch_size, shuffle=False,
                          collate_fn=collate_molecules)

    def prediction_rows(self, batch: dict, output: dict, labels: list[str] | None) -> list[dict]:
        """One row per molecule: ``{"id", "smiles", <target>: value}`` (regression in original units,
        classification as the probability of 1)."""
        names = labels or output.get("names") or [f"target{i}" for i in range(output["pred"].shape[1])]
        preds = output["pred"].detach().cpu().tolist()
        return [{"id": i, "smiles": s, **{n: float(v) for n, v in zip(names, row)}}
                for i, s, row in zip(batch["ids"], batch["smiles"], preds)]
