"""No host synchronisation inside the layers, and ``torch.compile`` of the encoder gives the same outputs."""

import pytest
import torch
from torch.overrides import TorchFunctionMode

from seqattn.core import Encoder, Tokens, mask_to_edge_index

HOST_READS = ("__bool__", "item", "tolist", "__int__", "__float__", "__index__")


class CountHostReads(TorchFunctionMode):
    """Counts tensor -> Python value reads (each one a device synchronisation on CUDA)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in HOST_READS:
            self.calls.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _lengths_mask(lengths, length):
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]


def _cases():
    x = torch.randn(3, 200, 16)
    mask = _lengths_mask([200, 120, 50], 200)
    adj = (torch.rand(3, 30, 30) > 0.7) | torch.eye(30, dtype=torch.bool)
    gmask = _lengths_mask([30, 25, 20], 30)
    adj &= gmask[:, None, :] & gmask[:, :, None]
    edges = mask_to_edge_index(adj)
    graph = Tokens(torch.randn(3, 30, 16), gmask, edge_index=edges, edge_bias=torch.randn(edges.shape[1], 4))
    return [({}, Tokens(x, mask)), ({"window": 5}, Tokens(x, mask)), ({}, Tokens(x)),
            ({}, Tokens(x, mask, causal=True)), ({"positional": "none"}, graph)]


def test_the_counter_sees_a_host_read():
    with CountHostReads() as reads:
        bool(torch.ones(2).all())
    assert reads.calls == ["__bool__"]


@pytest.mark.parametrize("case", range(5))
def test_host_reads_do_not_grow_with_depth(case):
    """The plan reads the host at most once per forward (lengths, edge checks); the layers never."""
    kwargs, tokens = _cases()[case]
    counts = []
    for depth in (1, 4):
        enc = Encoder(16, depth, 4, dropout=0.0, **kwargs)
        with CountHostReads() as reads:
            enc(tokens).sum().backward()
        counts.append(len(reads.calls))
    assert counts[0] == counts[1] <= 1, counts


def _compiled_matches(backend):
    torch.manual_seed(0)
    x = torch.randn(3, 40, 16)
    mask = _lengths_mask([40, 30, 12], 40)
    for kwargs, tokens in [({}, Tokens(x, mask)), ({"window": 3}, Tokens(x, mask)), ({}, Tokens(x, causal=True)),
                           ({"positional": "rotary", "conv_kernel": 3}, Tokens(x, mask))]:  # the text encoder's
        torch._dynamo.reset()  # each configuration compiles from a clean cache (no recompile limit across tests)
        enc = Encoder(16, 2, 4, dropout=0.0, **kwargs).eval()
        compiled = torch.compile(enc, backend=backend, fullgraph=True)  # fullgraph: no graph break anywhere
        with torch.no_grad():
            torch.testing.assert_close(compiled(tokens), enc(tokens), atol=1e-5, rtol=1e-5)
        want = torch.autograd.grad(enc(tokens).square().sum(), list(enc.parameters()))
        got = torch.autograd.grad(compiled(tokens).square().sum(), list(enc.parameters()))
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-4)


def test_torch_compile_traces_the_whole_encoder():
    """``aot_eager``: dynamo + autograd tracing of forward and backward without graph breaks (fast)."""
    _compiled_matches("aot_eager")


@pytest.mark.slow
def test_torch_compile_inductor_on_cpu():
    """The real compiler (C++ code generation, ~40 s cold on 2 cores)."""
    _compiled_matches("inductor")
