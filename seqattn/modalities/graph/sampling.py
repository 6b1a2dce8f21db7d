"""Neighbour sampling for node classification on graphs too large for one full batch.

:class:`EgoNeighborSampler` plugs into PyG's :class:`torch_geometric.loader.NeighborLoader`
(``neighbor_sampler=``). It samples *disjoint* ego subgraphs in plain torch: each seed node
gets its own subgraph (``num_neighbors[h]`` in-neighbours per node at hop ``h``, ``-1`` = all),
so one seed's subgraph never depends on which other seeds share its batch. PyG's own sampler
needs the compiled ``pyg-lib`` / ``torch-sparse`` extensions (not on PyPI for this torch), and
only ``pyg-lib`` samples disjoint subgraphs; this one needs neither.

With ``hash_seed`` set, the choice of neighbours is a fixed hash of (seed node, edge, hop)
instead of random: evaluation and prediction see the same subgraph for a node every time,
in any batch.

:func:`ego_batch` turns a sampled :class:`~torch_geometric.data.Data` (``batch`` = which seed
each node belongs to) into seqattn's padded graph batch: one subgraph per batch item, the
seed at position 0.

Letters: s seeds (= batch items), n nodes, e edges, f features.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import torch
from torch_geometric.data import Data
from torch_geometric.sampler import NeighborSampler, SamplerOutput

from seqattn.labels import IGNORE_INDEX

_MASK31 = 0x7FFFFFFF


def _hash_uniform(a: torch.Tensor, b: torch.Tensor, c: int, salt: int) -> torch.Tensor:
    """A deterministic float64 in [0, 1) per element from three integers (31-bit mixing)."""
    h = ((a & _MASK31) * 0x2545F491 + (b & _MASK31) * 0x1B873593 + (c * 0x3C6EF372 + salt)) & _MASK31
    for mult in (0x7FEB352D, 0x046CA68B):
        h = h ^ (h >> 15)
        h = (h * mult) & _MASK31
    h = h ^ (h >> 16)
    return h.to(torch.float64) / float(_MASK31 + 1)


class EgoNeighborSampler(NeighborSampler):
    """Disjoint neighbour sampling in plain torch, for :class:`~torch_geometric.loader.NeighborLoader`.

    Args:
        data: a homogeneous :class:`~torch_geometric.data.Data` with ``edge_index [2, E]``
            (row 0 source, row 1 target; a node's sampled neighbours are its sources).
        num_neighbors: in-neighbours sampled per node and hop, e.g. ``[10, 5]``; ``-1`` = all.
        hash_seed: ``None`` = random (torch's global generator); an int = deterministic choice.

    ``sample_from_nodes`` returns a :class:`~torch_geometric.sampler.SamplerOutput` whose
    ``node[:S]`` are the ``S`` seeds in order and ``batch[i]`` names the seed subgraph node
    ``i`` belongs to; ``row``/``col`` are local source/target indices of the sampled edges.
    """

    def __init__(self, data: Data, num_neighbors: Sequence[int], hash_seed: int | None = None) -> None:
        num_neighbors = [int(k) for k in num_neighbors]
        if not num_neighbors or any(k == 0 or k < -1 for k in num_neighbors):
            raise ValueError(f"num_neighbors must be a non-empty list of positive ints or -1 (all), "
                             f"got {num_neighbors}")
        with warnings.catch_warnings():  # PyG warns that its own sampler wants pyg-lib; this one does not
            warnings.simplefilter("ignore", UserWarning)
            super().__init__(data, num_neighbors=num_neighbors, disjoint=True)
        self.hash_seed = hash_seed
        self.hops = num_neighbors

    def _sample(self, seed: torch.Tensor, seed_time: torch.Tensor | None = None, **kwargs: Any) -> SamplerOutput:
        if isinstance(seed, dict) or seed_time is not None:
            raise ValueError("EgoNeighborSampler samples homogeneous, static graphs only")
        colptr, row = self.colptr, self.row
        n_total = int(self.num_nodes)
        seed = seed.to(torch.long)
        s = seed.numel()
        node = [seed]  # global ids, per hop
        owner = [torch.arange(s)]  # which seed subgraph each node belongs to
        keys = owner[0] * n_total + seed  # (subgraph, node) -> one int64 key
        sorted_keys, key_order = keys.sort()
        local_of_sorted = key_order  # local index of each sorted key
        count = s
        frontier = torch.arange(s)  # local ids to expand
        frontier_global, frontier_owner = seed, owner[0]
        rows, cols, edges = [], [], []
        sampled_nodes, sampled_edges = [s], []
        for hop, k in enumerate(self.hops):
            start = colptr[frontier_global]
            deg = colptr[frontier_global + 1] - start  # [F]
            seg = torch.repeat_interleave(torch.arange(frontier.numel()), deg)  # [M] frontier slot per edge
            first = torch.cumsum(deg, 0) - deg  # [F] offset of each slot's first edge
            pos = start[seg] + (torch.arange(seg.numel()) - first[seg])  # [M] CSC positions
            if k >= 0 and seg.numel():  # always shuffle: a subgraph's node order must not depend on its batch
                if self.hash_seed is None:
                    r = torch.rand(seg.numel(), dtype=torch.float64)
                else:
                    r = _hash_uniform(seed[frontier_owner[seg]], pos, hop, self.hash_seed)
                order = torch.argsort(seg.to(torch.float64) + r)  # by slot, random within a slot
                seg, pos = seg[order], pos[order]
                rank = torch.arange(seg.numel()) - first[seg]
                keep = rank < k
                seg, pos = seg[keep], pos[keep]
            tgt_local = frontier[seg]  # [M'] the frontier node each edge leads to
            src_global = row[pos]  # [M'] sampled neighbours (sources)
            src_owner = frontier_owner[seg]
            src_keys = src_owner * n_total + src_global
            # which sources are already in their subgraph
            idx = torch.searchsorted(sorted_keys, src_keys).clamp_max(sorted_keys.numel() - 1)
            known = sorted_keys[idx] == src_keys
            src_local = torch.where(known, local_of_sorted[idx], torch.full_like(src_keys, -1))
            new_keys, inverse = torch.unique(src_keys[~known], return_inverse=True)
            if new_keys.numel():
                # number the new nodes in order of first appearance (deterministic, hop by hop)
                first_seen = torch.full((new_keys.numel(),), src_keys.numel(), dtype=torch.long)
                first_seen.scatter_reduce_(0, inverse, torch.nonzero(~known).squeeze(1), reduce="amin")
                appear = torch.argsort(first_seen)
                rank_of = torch.empty_like(appear)
                rank_of[appear] = torch.arange(appear.numel())
                src_local[~known] = count + rank_of[inverse]
                new_sorted_by_appearance = new_keys[appear]
                new_local = torch.arange(count, count + new_keys.numel())
                count += new_keys.numel()
                all_keys = torch.cat([sorted_keys, new_sorted_by_appearance])
                all_local = torch.cat([local_of_sorted, new_local])
                sorted_keys, o = all_keys.sort()
                local_of_sorted = all_local[o]
                frontier_owner = new_sorted_by_appearance // n_total
                frontier_global = new_sorted_by_appearance % n_total
                frontier = new_local
                node.append(frontier_global)
                owner.append(frontier_owner)
            else:
                frontier = torch.empty(0, dtype=torch.long)
                frontier_global = frontier_owner = frontier
            rows.append(src_local)
            cols.append(tgt_local)
            edges.append(pos)
            sampled_nodes.append(int(frontier.numel()))
            sampled_edges.append(int(pos.numel()))
            if frontier.numel() == 0:
                break
        return SamplerOutput(node=torch.cat(node), row=torch.cat(rows), col=torch.cat(cols),
                             edge=torch.cat(edges), batch=torch.cat(owner),
                             num_sampled_nodes=sampled_nodes, num_sampled_edges=sampled_edges)


def ego_batch(data: Data, num_seeds: int | None = None) -> dict[str, Any]:
    """A sampled disjoint subgraph batch -> seqattn's padded graph batch (one seed subgraph per item).

    ``data``: from :class:`~torch_geometric.loader.NeighborLoader` with an
    :class:`EgoNeighborSampler`: ``x [n, F]``, ``y [n]`` (``IGNORE_INDEX`` = unlabeled),
    ``edge_index [2, e]`` local, ``batch [n]`` (seed subgraph of each node), ``n_id [n]``,
    optional ``edge_attr [e, Fe]``; the first ``S = data.batch_size`` nodes are the seeds.

    Returns ``x [S, N, F]`` (zero padded), ``mask [S, N]``, ``edge_index [2, e]`` over
    flattened ``s * N + position`` (row 0 source, row 1 target), ``edge_attr [e, Fe]`` or None,
    ``labels [S, N]`` (the seed's label at position 0, ``IGNORE_INDEX`` elsewhere),
    ``seed_mask [S, N]`` (True at each seed), ``node_index [S, N]`` (global node index, -1 on
    padding). Positions follow the sampling order, seed first.
    """
    s = int(num_seeds if num_seeds is not None else data.batch_size)
    n = data.num_nodes
    owner = data.batch  # [n]
    order = torch.sort(owner, stable=True).indices  # nodes grouped by subgraph, sampling order kept
    counts = torch.bincount(owner, minlength=s)  # [S]
    width = int(counts.max()) if s else 0
    starts = torch.cumsum(counts, 0) - counts
    position = torch.empty(n, dtype=torch.long)
    position[order] = torch.arange(n) - starts[owner[order]]
    flat = owner * width + position  # [n] flattened slot of each node
    x = data.x.new_zeros(s * width, data.x.shape[1])
    x[flat] = data.x
    mask = torch.zeros(s * width, dtype=torch.bool)
    mask[flat] = True
    node_index = torch.full((s * width,), -1, dtype=torch.long)
    node_index[flat] = data.n_id
    labels = torch.full((s * width,), IGNORE_INDEX, dtype=torch.long)
    seed_mask = torch.zeros(s * width, dtype=torch.bool)
    seeds = flat[:s]  # the first S sampled nodes are the seeds, one per subgraph, at position 0
    assert bool((position[:s] == 0).all())
    seed_mask[seeds] = True
    if getattr(data, "y", None) is not None:
        labels[seeds] = data.y[:s]
    edge_attr = getattr(data, "edge_attr", None)
    return {
        "x": x.view(s, width, -1),
        "mask": mask.view(s, width),
        "edge_index": flat[data.edge_index],  # [2, e]
        "edge_attr": edge_attr,
        "labels": labels.view(s, width),
        "seed_mask": seed_mask.view(s, width),
        "node_index": node_index.view(s, width),
    }
