"""``python -m seqattn.bench graph``: graph attention, seqattn vs PyG TransformerConv, dense vs edge, molecules/s.

Three measurements in one run, each cell in a fresh process (the forkserver of
:mod:`seqattn.bench.measure`, so peak memory is the growth of peak RSS during one step,
measured exactly as there):

1. **large graph**: a random graph of ``--nodes`` nodes and ``--edges`` directed edges, width
   ``--dim``, ``--heads`` heads, forward + backward of one attention layer:
   ``seqattn_edge`` = :class:`seqattn.core.MultiHeadAttention` with ``kernel="edge"`` (q/k/v and
   output projections) vs ``pyg_transformer_conv`` = ``torch_geometric.nn.TransformerConv``
   (``root_weight=False``, concat heads: q/k/v projections, no output projection).
   Target: seqattn ≤ 1.0× TransformerConv in time and in peak memory. For reference, the same
   seqattn layer without its output projection (which TransformerConv does not have) is also measured.
2. **molecule batch**: ``--graphs`` NCI molecules (RDKit's file) of 20–30 atoms, through the
   ``task=molecule`` network (GraphAdapter + 4-layer encoder, width 64, 4 heads + sum-pooled head),
   forward + backward, with the adapter's path forced ``dense`` or ``edge`` or chosen ``auto``,
   for hops 1 and 3 (denser blocks). Target: ``auto`` within 10% of the faster path.
3. **training epoch**: molecules/s of one epoch of ``task=molecule`` (Lightning ``fit``, no
   validation), on the cached featurised graphs.

Time: median of N steps after a warm-up step (adaptive N within ``--budget`` seconds).
"""

from __future__ import annotations

import argparse
import os
import shlex
import time
import traceback
from typing import Any, Callable

from seqattn.bench.measure import measure_step, run_cell_isolated, write_report
from seqattn.datakit.files import resolve_data_dir
from seqattn.modalities.graph.structure_cells import molecule_batch

LARGE_IMPLS = ("seqattn_edge", "pyg_transformer_conv", "seqattn_edge_no_out_proj")
MOLECULE_IMPLS = ("dense", "edge", "auto")


def _measure(step: Callable[[], None], repeats: int | None, budget: float, max_steps: int = 20) -> dict[str, Any]:
    """Peak-RSS growth of the first ``step()`` and the median time of N more (core's method)."""
    import torch

    return {"status": "ok", **measure_step(step, repeats, budget, max_steps=max_steps),
            "threads": torch.get_num_threads()}


def _large_cell(impl: str, nodes: int, edges: int, dim: int, heads: int, repeats: int | None,
                budget: float) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    edge_index = torch.randint(0, nodes, (2, edges))  # [2, E] random directed edges
    x = torch.randn(nodes, dim, requires_grad=True)  # [N, D]
    if impl.startswith("seqattn_edge"):
        from seqattn.core import MultiHeadAttention

        layer = MultiHeadAttention(dim, heads, kernel="edge")
        if impl == "seqattn_edge_no_out_proj":  # TransformerConv has no W^O: the same layer without it
            layer.out_proj = torch.nn.Identity()

        def call(inp, ei):
            return layer(inp[None], edge_index=ei)[0]  # [1, N, D] -> [N, D]
    else:
        from torch_geometric.nn import TransformerConv

        layer = TransformerConv(dim, dim // heads, heads=heads, concat=True, root_weight=False)

        def call(inp, ei):
            return layer(inp, ei)
    params = list(layer.parameters())
    small_x = torch.randn(64, dim, requires_grad=True)
    small_e = torch.randint(0, 64, (2, 256))

    def step_on(inp, ei):
        call(inp, ei).sum().backward()
        for p in params:
            p.grad = None
        inp.grad = None

    for _ in range(2):  # load every library, no big buffer yet
        step_on(small_x, small_e)
    return _measure(lambda: step_on(x, edge_index), repeats, budget)


def _molecule_cell(impl: str, graphs: int, hops: int, repeats: int | None, budget: float) -> dict[str, Any]:
    import torch

    from seqattn.core import Encoder
    from seqattn.modalities.graph.adapter import GraphAdapter
    from seqattn.modalities.graph.molecules import ATOM_FEATURES, BOND_FEATURES
    from seqattn.model.heads import PooledHead
    from seqattn.model.network import SequenceModel

    torch.manual_seed(0)
    batch = molecule_batch(graphs)
    model = SequenceModel(
        GraphAdapter(64, ATOM_FEATURES, BOND_FEATURES, heads=4, hops=hops),
        Encoder(64, depth=4, heads=4, ff_mult=2, dropout=0.0, positional="none", graph_path=impl),
        PooledHead(64, 1, pooling="sum"),
    )
    with torch.no_grad():
        model(batch)
    path = model.encoder.last_graph_path
    n_edges = int(model.tokens(batch).edge_index.shape[1])

    def step():
        model(batch)["logits"].sum().backward()
        model.zero_grad(set_to_none=True)

    step()
    result = _measure(step, repeats, budget, max_steps=60)  # short steps: more of them against noise
    result.update(path=path, attention_edges=n_edges, padded_nodes=int(batch["mask"].shape[1]),
                  fill=n_edges / (batch["mask"].numel() * batch["mask"].shape[1]))
    return result


def _epoch_cell(data_dir: str, limit: int | None, out_dir: str) -> dict[str, Any]:
    import lightning as L
    from hydra.utils import instantiate

    from seqattn.configs import compose_config
    from seqattn.run import build_objective

    overrides = ["task=molecule", f"paths.data_dir={data_dir}", f"paths.output_dir={out_dir}"]
    if limit:
        overrides.append(f"data.limit={limit}")
    cfg = compose_config(overrides)
    L.seed_everything(0)
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")  # featurise (or read the cache) outside the timed epoch
    model = build_objective(cfg, datamodule)
    trainer = L.Trainer(max_epochs=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        accelerator="cpu", gradient_clip_val=1.0)
    start = time.perf_counter()
    trainer.fit(model, train_dataloaders=datamodule.train_dataloader())
    seconds = time.perf_counter() - start
    import torch

    n = len(datamodule.datasets["train"])
    return {"status": "ok", "molecules": n, "seconds": seconds, "molecules_per_s": n / seconds,
            "batch_size": int(cfg.data.batch_size), "threads": torch.get_num_threads()}


def _graph_entry(conn: Any, kwargs: dict[str, Any]) -> None:
    """Child-process entry (see ``seqattn.bench.measure.run_cell_isolated``)."""
    kind = kwargs.pop("kind")
    try:
        result = {"large": _large_cell, "molecule": _molecule_cell, "epoch": _epoch_cell}[kind](**kwargs)
    except (MemoryError, RuntimeError) as exc:
        msg = str(exc)
        oom = isinstance(exc, MemoryError) or "memory" in msg.lower() or "allocate" in msg.lower()
        result = {"status": "OOM" if oom else "failed", "error": msg.splitlines()[0][:200] if msg else repr(exc)}
    except Exception as exc:
        traceback.print_exc()
        result = {"status": "failed", "error": repr(exc)[:200]}
    conn.send(result)
    conn.close()


# --------------------------------------------------------------------------- the suite


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=100_000, help="nodes of the large random graph")
    parser.add_argument("--edges", type=int, default=1_000_000, help="directed edges of the large random graph")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--graphs", type=int, default=128, help="molecules in the molecule batch")
    parser.add_argument("--hops", type=int, nargs="+", default=[1, 3], help="hops for the molecule batch")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per cell (default: adaptive)")
    parser.add_argument("--budget", type=float, default=5.0, help="seconds of timed steps per cell when adaptive")
    parser.add_argument("--epoch-limit", type=int, default=None, help="data.limit for the epoch (default: all)")
    parser.add_argument("--no-epoch", action="store_true", help="skip the training-epoch measurement")
    parser.add_argument("--data-dir", default=str(resolve_data_dir()))
    parser.add_argument("--cell-timeout", type=float, default=900.0)
    parser.add_argument("--out", metavar="FILE.md", help="also write the report here")
    parser.add_argument("--json", metavar="FILE", help="write every measurement as JSON")


def _fmt(cell: dict[str, Any], key: str, digits: int = 1) -> str:
    return f"{cell[key]:.{digits}f}" if cell.get("status") == "ok" else cell.get("status", "–")


def _ratio(a: dict, b: dict, key: str) -> float | None:
    if a.get("status") == "ok" and b.get("status") == "ok" and b[key] > 0:
        return a[key] / b[key]
    return None


def run(args: argparse.Namespace) -> int:
    command = "python -m seqattn.bench " + " ".join(shlex.quote(a) for a in getattr(args, "argv", ["graph"]))
    print(f"$ {command}", flush=True)
    if args.dim % args.heads:
        raise ValueError(f"--dim={args.dim} must be divisible by --heads={args.heads}")
    load_before = os.getloadavg()
    cells: list[dict[str, Any]] = []

    def measure(label: str, **kwargs: Any) -> dict[str, Any]:
        start = time.perf_counter()
        cell = dict(kwargs, **run_cell_isolated(args.cell_timeout, entry=_graph_entry, **kwargs))
        cell["wall_s"] = time.perf_counter() - start
        cells.append(cell)
        detail = (f"{cell.get('time_ms', 0):.1f} ms (median of {cell.get('repeats')}), peak +{cell.get('peak_mb', 0):.1f} MB"
                  if cell["status"] == "ok" and "time_ms" in cell else
                  f"{cell.get('molecules_per_s', 0):.0f} molecules/s" if cell["status"] == "ok" else
                  f"{cell['status']}: {cell.get('error', '')}")
        print(f"[{len(cells)}] {label:<40} {detail}", flush=True)
        return cell

    large = {impl: measure(f"large {impl}", kind="large", impl=impl, nodes=args.nodes, edges=args.edges,
                           dim=args.dim, heads=args.heads, repeats=args.repeats, budget=args.budget)
             for impl in LARGE_IMPLS}
    mols = {(impl, hops): measure(f"molecules hops={hops} {impl}", kind="molecule", impl=impl, graphs=args.graphs,
                                  hops=hops, repeats=args.repeats, budget=args.budget)
            for hops in args.hops for impl in MOLECULE_IMPLS}
    epoch = None
    if not args.no_epoch:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            epoch = measure("task=molecule training epoch", kind="epoch", data_dir=args.data_dir,
                            limit=args.epoch_limit, out_dir=tmp)

    threads = next((c["threads"] for c in cells if c.get("status") == "ok"), None)
    lines = [f"Forward+backward, fp32, CPU ({threads or '?'} torch threads); time = median of N steps after a "
             "warm-up step; peak MB = growth of peak RSS during one step, each cell in a fresh process.", ""]
    a, b = large["seqattn_edge"], large["pyg_transformer_conv"]
    lines += [f"(1) random graph, {args.nodes} nodes, {args.edges} edges, width {args.dim}, {args.heads} heads, "
              "one attention layer:", "",
              "| impl | ms | peak MB |", "|---|---:|---:|",
              f"| seqattn MultiHeadAttention(kernel=edge) | {_fmt(a, 'time_ms')} | {_fmt(a, 'peak_mb')} |",
              f"| PyG TransformerConv(root_weight=False) | {_fmt(b, 'time_ms')} | {_fmt(b, 'peak_mb')} |",
              f"| (seqattn without its output projection W^O, which TransformerConv lacks) | "
              f"{_fmt(large['seqattn_edge_no_out_proj'], 'time_ms')} | {_fmt(large['seqattn_edge_no_out_proj'], 'peak_mb')} |",
              ""]
    lines += [f"(2) {args.graphs} NCI molecules of 20-30 atoms, task=molecule network (4 layers, width 64, 4 heads):",
              "", "| hops | padded N | attention edges | fill | dense ms | edge ms | auto ms (path) | dense MB | edge MB |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for hops in args.hops:
        d, e, au = mols[("dense", hops)], mols[("edge", hops)], mols[("auto", hops)]
        ref = next((c for c in (d, e, au) if c.get("status") == "ok"), {})
        lines.append(f"| {hops} | {ref.get('padded_nodes', '–')} | {ref.get('attention_edges', '–')} | "
                     f"{ref.get('fill', float('nan')):.3f} | {_fmt(d, 'time_ms')} | {_fmt(e, 'time_ms')} | "
                     f"{_fmt(au, 'time_ms')} ({au.get('path', '?')}) | {_fmt(d, 'peak_mb')} | {_fmt(e, 'peak_mb')} |")
    lines.append("")
    if epoch is not None:
        lines += ["(3) one training epoch of task=molecule: " + (
            f"{epoch['molecules']} molecules in {epoch['seconds']:.1f} s = {epoch['molecules_per_s']:.0f} molecules/s "
            f"(batch {epoch['batch_size']}, Lightning fit, no validation)" if epoch["status"] == "ok"
            else f"{epoch['status']}: {epoch.get('error')}"), ""]

    targets = []
    rt, rm = _ratio(a, b, "time_ms"), _ratio(a, b, "peak_mb")
    for name, r in (("time", rt), ("peak memory", rm)):
        targets.append(f"target seqattn edge {name} <= 1.0x TransformerConv: "
                       + ("not measured" if r is None else f"{'met' if r <= 1.0 else 'missed'} ({r:.2f}x)"))
    for hops in args.hops:
        d, e, au = mols[("dense", hops)], mols[("edge", hops)], mols[("auto", hops)]
        if all(c.get("status") == "ok" for c in (d, e, au)):
            best = min(d["time_ms"], e["time_ms"])
            r = au["time_ms"] / best
            targets.append(f"target auto within 10% of the faster path (hops={hops}): {'met' if r <= 1.10 else 'missed'} "
                           f"(auto chose {au['path']}: {r:.2f}x the faster, "
                           f"{'dense' if d['time_ms'] <= e['time_ms'] else 'edge'}; dense/edge = "
                           f"{d['time_ms'] / e['time_ms']:.2f}x)")
        else:
            targets.append(f"target auto within 10% of the faster path (hops={hops}): not measured")
    write_report(args, command, lines + targets, cells, targets, load_before, os.getloadavg())
    return 0
