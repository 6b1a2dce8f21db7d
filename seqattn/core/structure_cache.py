"""Results computed from tensors that a run feeds again unchanged, remembered per tensor object.

A full-graph run (Cora, karate: the whole graph is the batch) hands the same feature matrix, mask and edge
list to every forward, and the training and the evaluation items each keep theirs from epoch to epoch. What a
forward derives from them alone (the k-hop edges, the normalised adjacency and its CSR matrices, the non-zeros of
sparse features) was computed again at every forward: on Cora ``k_hop_edges`` 3 ms, ``gcn_operator`` with its
matrices 1.4 ms twice and the features' non-zeros ~10 ms per forward (two forwards a training step with the
consistency loss, one per validation); 20 epochs of ``experiment=citation_graph`` took 3.1 s of fit before, 2.2 s
with the memo, the same validation loss.

A :class:`TensorMemo` keys an entry by the tensor objects themselves (weak references: a freed tensor is never
matched by another one at its address) and their version counters (an in-place change is a miss), plus
hashable parameters and whether inference mode is on (a result made there serves inference only: autograd
refuses to save inference tensors). What it remembers must need no gradient (structure, not activations).
Inside ``torch.compile`` / export / a jit trace it computes every time."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Hashable, TypeVar

import torch

from seqattn.core.checks import tracing

V = TypeVar("V")


class TensorMemo:
    """``memo(tensors, params, compute)``: ``compute()``'s result, remembered for the same ``tensors`` (objects,
    unchanged since) and ``params``; the ``size`` most recently used entries are kept, and none whose tensors were
    freed (a miss drops them)."""

    def __init__(self, size: int = 4) -> None:
        if size < 1:
            raise ValueError(f"a TensorMemo keeps at least 1 entry, got size={size}")
        self.size = size
        self._entries: list[tuple[tuple, Hashable, Any]] = []  # (((weakref, version), ...), params, value)
        self.hits = self.misses = 0

    def __call__(self, tensors: tuple[torch.Tensor, ...], params: Hashable, compute: Callable[[], V]) -> V:
        if tracing() or any(t.is_inference() for t in tensors):  # inference tensors have no version counter
            return compute()
        params = (params, torch.is_inference_mode_enabled())
        for i, (keys, known, value) in enumerate(self._entries):
            if known == params and len(keys) == len(tensors) and all(
                    ref() is t and version == t._version for (ref, version), t in zip(keys, tensors)):
                if i:
                    self._entries.insert(0, self._entries.pop(i))
                self.hits += 1
                return value
        self.misses += 1
        value = compute()
        # entries of freed tensors can never hit again: dropped, so their results (a graph's CSR matrices) go too
        self._entries = [entry for entry in self._entries if all(ref() is not None for ref, _ in entry[0])]
        self._entries.insert(0, (tuple((weakref.ref(t), t._version) for t in tensors), params, value))
        del self._entries[self.size:]
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
