"""The structure cells this modality declares for ``python -m seqattn.bench core --cells``.

``graph_bias``: the graph attention of the ``task=molecule`` encoder (4 layers, 4 heads of width 16)
on 128 NCI molecules of 20-30 atoms, with the graph adapter's learned edge-feature + hop-distance
bias (hops 1 and 3), forward + backward of the attention (plan + kernels): ``dense_sdpa`` (the float
bias that requires grad sends SDPA to its math path) and ``edge`` are today's two paths (today's
``auto`` took the edge path below a 0.15 fill); ``biased`` = the planner's fused biased path forced
(custom autograd, the bias gradient at the edges only); ``planned`` = the planner's choice.

``graph_layers``: the whole ``task=molecule`` encoder (4 layers of width 64, 4 heads, feed-forward x2: projections,
norms, feed-forward and the edge kernel) on a batch of NCI molecules as they come (any size: padded to the
largest), forward + backward, ``padded`` (every layer on ``[B, N, D]``) vs ``packed`` (the real atoms only,
``[1, T, D]``: ``Encoder(pack_graphs=True)``, the default).

``graph_fill``: the same attention on molecule-like graphs (chains with ring closures, hops 1) padded to
12-64 nodes, ``dense`` vs ``edge`` vs ``planned``: where the crossover fill lies (the cost model's
:data:`~seqattn.core.graph_cost.MEASURED_CROSSOVER_FILL`).

``propagation``: ten personalised-PageRank steps at width 64 (``Encoder(output_propagation=10)``) over random graphs
of karate's, Cora's and PubMed's sizes, forward + backward: ``gathered`` (gather, weight, add into the targets) vs
``sparse`` (the CSR product of :class:`~seqattn.core.propagation.GraphOperator`, built inside the step).

:mod:`seqattn.bench.structure` finds :data:`STRUCTURE_CELLS` by walking the modality folders and
documents the form of a cell; this module imports only the core and this modality (torch lazily).
"""

from __future__ import annotations

from typing import Any, Callable


def molecule_batch(graphs: int, atoms: tuple[int, int] = (20, 30)) -> dict[str, Any]:
    """The first ``graphs`` NCI molecules (RDKit's TPSA file) of ``atoms[0]``-``atoms[1]`` atoms, collated:
    ``x [B, N, F]``, ``mask [B, N]``, ``edge_index [2, E]``, ``edge_attr [E, Fe]``, ``labels``."""
    from seqattn.modalities.graph.molecule_data import collate_molecules
    from seqattn.modalities.graph.molecules import featurize_records, nci_tpsa_path, read_smiles_table

    records = read_smiles_table(nci_tpsa_path(), "smiles", ["tpsa"], header=False, names=["smiles", "tpsa"])
    chosen = []
    for rec in records:
        g, _ = featurize_records([rec], skip_invalid=True)
        if g and atoms[0] <= g[0]["x"].shape[0] <= atoms[1]:
            chosen.append(g[0])
        if len(chosen) == graphs:
            break
    return collate_molecules(chosen)


def graph_bias_step(impl: str, cfg: dict[str, Any], small: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    """The graph attention of the molecule encoder: plan (once per forward) + 4 layers' attention,
    forward + backward into q, k, v and the learned bias (the adapter's edge-feature + hop-distance
    bias of these molecules; the projections around it are the same for every path and not timed)."""
    import torch

    from seqattn.core.plan import plan_attention
    from seqattn.modalities.graph.adapter import GraphAdapter
    from seqattn.modalities.graph.molecules import ATOM_FEATURES, BOND_FEATURES

    torch.manual_seed(0)
    graphs, hops = (4, 1) if small else (cfg["graphs"], cfg["hops"])
    batch = molecule_batch(graphs)
    adapter = GraphAdapter(64, ATOM_FEATURES, BOND_FEATURES, heads=4, hops=hops)
    tokens = adapter(**{k: batch[k] for k in ("x", "mask", "edge_index", "edge_attr")})
    b, n = tokens.mask.shape
    bias = (tokens.edge_bias.detach() + 0.1 * torch.randn_like(tokens.edge_bias)).requires_grad_()
    layers = [[torch.randn(b, n, 4, 16).transpose(1, 2).requires_grad_() for _ in range(3)] for _ in range(4)]
    path, graph_path = {"dense_sdpa": ("dense", "dense"), "edge": ("edge", "edge"), "biased": ("biased", "auto"),
                        "planned": (None, "auto")}[impl]
    edges = int(tokens.edge_index.shape[1])
    info: dict[str, Any] = {"batch": graphs, "heads": 4, "head_dim": 16, "attention_edges": edges, "padded_nodes": n,
                            "fill": edges / (b * n * n), "allowed_pairs": edges, "hops": hops}

    def step():
        plan = plan_attention(b, n, heads=4, dim=64, device=bias.device, mask=tokens.mask,
                              edge_index=tokens.edge_index, edge_bias=bias, graph_path=graph_path, path=path)
        loss = sum(plan.attend(q, k, v)[0].square().sum() for q, k, v in layers)
        loss.backward()
        for t in [bias] + [t for qkv in layers for t in qkv]:
            t.grad = None
        info["path"] = plan.path

    return step, info


def graph_bias_targets(rows: list[dict[str, Any]]) -> list[str]:
    """One line per configuration: the planner vs today's automatic path (dense at fill >= 0.15, else edge)."""

    def find(impl: str, config: str) -> dict[str, Any] | None:
        return next((r for r in rows if r["impl"] == impl and r["config"] == config and r["status"] == "ok"), None)

    out = []
    for cfg in sorted({r["config"] for r in rows}):
        today = [r for r in (find("dense_sdpa", cfg), find("edge", cfg)) if r]
        b = find("planned", cfg)
        if today and b:
            auto_today = "dense_sdpa" if today[0].get("fill", 0) >= 0.15 else "edge"
            ref = find(auto_today, cfg) or today[0]
            ratio = ref["time_ms"] / b["time_ms"]
            best = min(r["time_ms"] for r in today) / b["time_ms"]
            out.append(f"target graph attention with learned biases, {cfg}: planned >= 2x faster than today "
                       f"(today's auto path: {auto_today}): {'met' if ratio >= 2 else 'missed'} ({ratio:.2f}x; "
                       f"{best:.2f}x vs the faster of today's two paths)")
    return out


def graph_layers_step(impl: str, cfg: dict[str, Any], small: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    """The molecule recipe's encoder stack (``conf/model/graph_transformer.yaml``: 4 layers, width 64, 4 heads,
    ff_mult 2, the edge path) on ``graphs`` NCI molecules of any size, forward + backward into every parameter
    and the adapter's tokens: ``padded`` (``pack_graphs=False``) vs ``packed`` (the default)."""
    import torch

    from seqattn.core import Encoder
    from seqattn.modalities.graph.adapter import GraphAdapter
    from seqattn.modalities.graph.molecules import ATOM_FEATURES, BOND_FEATURES

    torch.manual_seed(0)
    graphs = 4 if small else cfg["graphs"]
    batch = molecule_batch(graphs, atoms=(1, 10**6))
    adapter = GraphAdapter(64, ATOM_FEATURES, BOND_FEATURES, heads=4, hops=1)
    with torch.no_grad():
        tokens = adapter(**{k: batch[k] for k in ("x", "mask", "edge_index", "edge_attr")})
    x = tokens.x.clone().requires_grad_()
    bias = tokens.edge_bias.clone().requires_grad_()
    encoder = Encoder(64, 4, 4, ff_mult=2, dropout=0.0, positional="none", graph_path="edge",
                      pack_graphs=impl == "packed")
    b, n = tokens.mask.shape
    edges = int(tokens.edge_index.shape[1])
    real = int(tokens.mask.sum())
    info: dict[str, Any] = {"batch": graphs, "heads": 4, "head_dim": 16, "attention_edges": edges, "padded_nodes": n,
                            "real_nodes": real, "padding": b * n / real, "allowed_pairs": edges}

    def step():
        out = encoder(x, mask=tokens.mask, edge_index=tokens.edge_index, edge_bias=bias)
        out.square().sum().backward()
        for t in [x, bias, *encoder.parameters()]:
            t.grad = None
        info["path"] = encoder.last_graph_path

    return step, info


def _ok_rows_by_config(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """``[(config, {impl: row})]`` of the rows that ran (status ok), configs sorted."""
    return [(cfg, {r["impl"]: r for r in rows if r["config"] == cfg and r["status"] == "ok"})
            for cfg in sorted({r["config"] for r in rows})]


def _pair_targets(rows: list[dict[str, Any]], reference: str, candidate: str,
                  line: Callable[[str, dict[str, dict[str, Any]], float], str]) -> list[str]:
    """One ``line(config, {impl: row}, candidate time / reference time)`` per configuration where both ran."""
    return [line(cfg, got, got[candidate]["time_ms"] / got[reference]["time_ms"])
            for cfg, got in _ok_rows_by_config(rows) if {reference, candidate} <= set(got)]


def graph_layers_targets(rows: list[dict[str, Any]]) -> list[str]:
    """One line per size: the packed stack against the padded one (the padding factor beside it)."""
    return _pair_targets(rows, "padded", "packed", lambda cfg, got, ratio: (
        f"target molecule encoder on the real atoms only, {cfg} (padded {got['packed']['padding']:.2f}x the atoms): "
        f"packed faster than padded: {'met' if ratio < 1 else 'missed'} ({ratio:.2f}x the padded step)"))


def molecule_like_graphs(graphs: int, nodes: int, spread: float = 0.6, seed: int = 0):
    """``graphs`` molecule-like graphs padded to ``nodes`` (sizes drawn from ``[nodes·(1-spread), nodes]``, the
    first of ``nodes``): a chain with a ring closure every 6 atoms, both directions, plus self-loops (the
    adapter's hops=1 attention edges). Returns ``(mask [B, N] bool, edge_index [2, E])`` sorted by target."""
    import torch

    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(max(2, int(nodes * (1 - spread))), nodes + 1, (graphs,), generator=g).tolist()
    sizes[0] = nodes
    mask = torch.zeros(graphs, nodes, dtype=torch.bool)
    src, dst = [], []
    for b, n in enumerate(sizes):
        mask[b, :n] = True
        pairs = [(i, i + 1) for i in range(n - 1)] + [(i, i + 5) for i in range(0, n - 5, 6)]
        for i, j in pairs:
            src += [b * nodes + i, b * nodes + j]
            dst += [b * nodes + j, b * nodes + i]
        src += [b * nodes + i for i in range(n)]
        dst += [b * nodes + i for i in range(n)]
    edge_index = torch.tensor([src, dst])
    order = torch.argsort(edge_index[1] * graphs * nodes + edge_index[0])
    return mask, edge_index[:, order]


def graph_fill_step(impl: str, cfg: dict[str, Any], small: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    """The planned graph attention (plan + 4 layers, 4 heads of width 16, a learned per-edge bias, fwd + bwd)
    on molecule-like graphs padded to ``nodes``: ``dense`` (fused dense blocks), ``edge`` (the O(E) kernel),
    ``planned`` (``auto``: the cost model's choice). Measures the crossover fill behind
    :data:`seqattn.core.graph_cost.MEASURED_CROSSOVER_FILL`."""
    import torch

    from seqattn.core.plan import plan_attention

    torch.manual_seed(0)
    graphs, nodes = (4, 12) if small else (cfg["graphs"], cfg["nodes"])
    mask, edge_index = molecule_like_graphs(graphs, nodes)
    bias = torch.randn(edge_index.shape[1], 4, requires_grad=True)
    layers = [[torch.randn(graphs, 4, nodes, 16, requires_grad=True) for _ in range(3)] for _ in range(4)]
    edges = int(edge_index.shape[1])
    info: dict[str, Any] = {"batch": graphs, "heads": 4, "head_dim": 16, "attention_edges": edges, "padded_nodes": nodes,
                            "fill": edges / (graphs * nodes * nodes), "allowed_pairs": edges}
    graph_path = {"dense": "dense", "edge": "edge", "planned": "auto"}[impl]

    def step():
        plan = plan_attention(graphs, nodes, heads=4, dim=64, device=bias.device, mask=mask, edge_index=edge_index,
                              edge_bias=bias, graph_path=graph_path)
        loss = sum(plan.attend(q, k, v)[0].square().sum() for q, k, v in layers)
        loss.backward()
        for t in [bias] + [t for qkv in layers for t in qkv]:
            t.grad = None
        info["path"] = plan.path

    return step, info


def graph_fill_targets(rows: list[dict[str, Any]]) -> list[str]:
    """One line per size: the planned path within 10% of the faster of dense and edge."""
    out = []
    for cfg, got in _ok_rows_by_config(rows):
        if {"dense", "edge", "planned"} <= set(got):
            best = min(got["dense"]["time_ms"], got["edge"]["time_ms"])
            ratio = got["planned"]["time_ms"] / best
            out.append(f"target graph path choice, {cfg} (fill {got['planned'].get('fill', 0):.3f}, planned "
                       f"{got['planned'].get('path')}): within 10% of the faster path: "
                       f"{'met' if ratio <= 1.1 else 'missed'} ({ratio:.2f}x; dense/edge "
                       f"{got['dense']['time_ms'] / got['edge']['time_ms']:.2f})")
    return out


def propagation_step(impl: str, cfg: dict[str, Any], small: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    """Ten personalised-PageRank steps (``Encoder(output_propagation=10)``, alpha 0.1) over a random undirected
    graph of ``nodes`` nodes and ``edges`` edges (+ self-loops), width 64, forward + backward, the operator
    built inside the step: ``gathered`` (gather the source rows, weight, add into the targets) vs ``sparse``
    (the CSR product :class:`seqattn.core.propagation.GraphOperator` takes on CPU / CUDA at fp32 / fp64)."""
    import torch

    from seqattn.core.propagation import ppr_propagate

    torch.manual_seed(0)
    nodes, edges = (40, 80) if small else (cfg["nodes"], cfg["edges"])
    pairs = torch.randint(0, nodes, (2, edges))
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    x = torch.randn(1, nodes, 64, requires_grad=True)
    mask = torch.ones(1, nodes, dtype=torch.bool)
    info: dict[str, Any] = {"nodes": nodes, "attention_edges": int(edge_index.shape[1]), "width": 64, "steps": 10}

    def step():
        from seqattn.core import propagation

        sparse = propagation.GraphOperator.sparse
        if impl == "gathered":
            propagation.GraphOperator.sparse = lambda self, dtype, device: False
        try:
            probe = propagation.GraphOperator(edge_index[0], edge_index[1], x.new_ones(edge_index.shape[1]), nodes)
            info["path"] = "sparse" if probe.sparse(x.dtype, x.device) else "gathered"
            ppr_propagate(x, edge_index, mask, 10, 0.1).square().sum().backward()
        finally:
            propagation.GraphOperator.sparse = sparse
        x.grad = None

    return step, info


def propagation_targets(rows: list[dict[str, Any]]) -> list[str]:
    """One line per size: the sparse product's time against the gathered one's."""
    return _pair_targets(rows, "gathered", "sparse", lambda cfg, got, ratio: (
        f"target propagation, {cfg}: sparse product at most the gathered time: "
        f"{'met' if ratio <= 1.0 else 'missed'} ({ratio:.2f}x)"))


#: cells of ``python -m seqattn.bench core --cells`` this modality owns (the form: ``seqattn.bench.structure``)
STRUCTURE_CELLS: dict[str, dict[str, Any]] = {
    "graph_bias": {
        "impls": ("dense_sdpa", "edge", "biased", "planned"),
        "sizes": lambda tiny: [{"graphs": 8, "hops": 1}] if tiny else [{"graphs": 128, "hops": 1},
                                                                       {"graphs": 128, "hops": 3}],
        "describe": lambda cfg: f"{cfg['graphs']} molecules, hops {cfg['hops']}",
        "step": graph_bias_step,
        "targets": graph_bias_targets,
    },
    "graph_layers": {
        "impls": ("padded", "packed"),
        "sizes": lambda tiny: [{"graphs": 8}] if tiny else [{"graphs": 32}, {"graphs": 128}],
        "describe": lambda cfg: f"{cfg['graphs']} NCI molecules, any size",
        "step": graph_layers_step,
        "targets": graph_layers_targets,
    },
    "graph_fill": {
        "impls": ("dense", "edge", "planned"),
        "sizes": lambda tiny: [{"graphs": 8, "nodes": 12}] if tiny else [
            {"graphs": g, "nodes": n} for g in (32, 128) for n in (12, 24, 48, 64)],
        "describe": lambda cfg: f"{cfg['graphs']} molecule-like graphs padded to {cfg['nodes']}",
        "step": graph_fill_step,
        "targets": graph_fill_targets,
    },
    "propagation": {
        "impls": ("gathered", "sparse"),
        "sizes": lambda tiny: [{"nodes": 40, "edges": 80}] if tiny else [
            {"nodes": 34, "edges": 78}, {"nodes": 2708, "edges": 5278}, {"nodes": 19717, "edges": 44324}],
        "describe": lambda cfg: f"{cfg['nodes']} nodes, {cfg['edges']} undirected edges, 10 steps",
        "step": propagation_step,
        "targets": propagation_targets,
    },
}
