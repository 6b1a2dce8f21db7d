"""CTC decoding: collapse rule, greedy = best path, prefix beam search = brute force over all paths."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import torch

from seqattn.objectives.ctc_decoding import (
    beam_decode,
    collapse,
    greedy_decode,
    pad_sequences,
    prefix_beam_search,
)


def _brute_force(log_probs: torch.Tensor, blank: int = 0) -> dict[tuple[int, ...], float]:
    """Every label sequence's log-probability: the sum over all K^F paths that collapse to it."""
    frames, classes = log_probs.shape
    totals: dict[tuple[int, ...], float] = defaultdict(float)
    for path in itertools.product(range(classes), repeat=frames):
        p = math.exp(sum(float(log_probs[t, c]) for t, c in enumerate(path)))
        totals[tuple(collapse(path, blank))] += p
    return {seq: math.log(p) for seq, p in totals.items()}


def _random_log_probs(frames: int, classes: int, seed: int, sharpness: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (sharpness * torch.randn(frames, classes, generator=g)).log_softmax(-1)


@pytest.mark.parametrize("path, want", [
    ([1, 1, 0, 1, 2, 2], [1, 1, 2]),  # a blank separates a real repeat
    ([1, 1, 1], [1]),  # repeats merge
    ([0, 0, 0], []),  # only blanks
    ([0, 2, 0, 0, 2, 1, 0], [2, 2, 1]),
    ([], []),
])
def test_collapse_merges_repeats_then_drops_blanks(path, want):
    assert collapse(path) == want


def test_collapse_with_another_blank_index():
    assert collapse([3, 3, 1, 3, 1, 1], blank=3) == [1, 1]


def test_greedy_is_the_collapsed_best_path_and_ignores_padding_frames():
    log_probs = torch.stack([_random_log_probs(7, 4, seed) for seed in range(3)])  # [B, F, K]
    lengths = torch.tensor([7, 4, 1])
    log_probs[1, 4:] = torch.tensor([-9.0, 0.0, -9.0, -9.0])  # padding that would add a label if read
    got = greedy_decode(log_probs, lengths)
    for i, n in enumerate(lengths.tolist()):
        assert got[i] == collapse(log_probs[i, :n].argmax(-1).tolist())
    # the best path is the brute-force most probable *path*
    best_path = max(itertools.product(range(4), repeat=4),
                    key=lambda p: sum(float(log_probs[1, t, c]) for t, c in enumerate(p)))
    assert got[1] == collapse(best_path)


@pytest.mark.parametrize("frames, classes, seed", [(3, 3, 0), (4, 3, 1), (5, 3, 2), (4, 4, 3), (6, 2, 4), (3, 5, 5)])
def test_wide_prefix_beam_search_equals_brute_force_over_all_paths(frames, classes, seed):
    log_probs = _random_log_probs(frames, classes, seed, sharpness=1.0)
    exact = _brute_force(log_probs)
    beams = prefix_beam_search(log_probs, beam_width=10_000)
    got = {tuple(seq): lp for seq, lp in beams}
    assert set(got) == set(exact)  # every reachable label sequence, each once
    for seq, lp in exact.items():
        assert got[seq] == pytest.approx(lp, abs=1e-9), seq
    assert sum(math.exp(lp) for lp in got.values()) == pytest.approx(1.0)
    best = max(exact, key=exact.get)
    assert tuple(beams[0][0]) == best  # the most probable sequence first


@pytest.mark.parametrize("seed", range(8))
def test_a_narrow_beam_keeps_exact_scores_and_finds_the_map_sequence_on_peaked_inputs(seed):
    log_probs = _random_log_probs(6, 4, seed, sharpness=3.0)
    exact = _brute_force(log_probs)
    beams = prefix_beam_search(log_probs, beam_width=4)
    assert len(beams) <= 4
    for seq, lp in beams:  # a kept prefix's score never exceeds its exact probability
        assert lp <= exact[tuple(seq)] + 1e-9
    assert tuple(beams[0][0]) == max(exact, key=exact.get)


def test_beam_search_beats_greedy_where_paths_add_up():
    """Two frames, p(blank) = 0.6, p(a) = 0.4 each: the best path is blank-blank (0.36, decodes to
    nothing) but P("a") = 0.4·0.4 + 0.4·0.6 + 0.6·0.4 = 0.64."""
    log_probs = torch.tensor([[0.6, 0.4], [0.6, 0.4]]).log()
    assert greedy_decode(log_probs[None])[0] == []
    beams = prefix_beam_search(log_probs, beam_width=2)
    assert beams[0][0] == [1] and math.exp(beams[0][1]) == pytest.approx(0.64)
    assert beams[1][0] == [] and math.exp(beams[1][1]) == pytest.approx(0.36)
    assert beam_decode(log_probs[None], beam_width=2) == [[1]]


def test_a_repeated_label_needs_a_blank_between():
    """a a (no blank) is one 'a'; P('a a') only comes from paths with a blank in between."""
    log_probs = torch.tensor([[0.1, 0.9], [0.1, 0.9], [0.1, 0.9]]).log()
    exact = _brute_force(log_probs)
    got = {tuple(s): lp for s, lp in prefix_beam_search(log_probs, beam_width=100)}
    assert math.exp(got[(1, 1)]) == pytest.approx(0.9 * 0.1 * 0.9)  # only a - a
    assert got == pytest.approx(exact)


def test_pruning_by_min_log_prob_skips_unlikely_labels():
    log_probs = torch.tensor([[0.5, 0.499, 0.001], [0.5, 0.499, 0.001]]).log()
    pruned = prefix_beam_search(log_probs, beam_width=100, min_log_prob=math.log(0.01))
    assert all(2 not in seq for seq, _ in pruned)
    assert any(2 in seq for seq, _ in prefix_beam_search(log_probs, beam_width=100))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="beam_width"):
        prefix_beam_search(torch.zeros(3, 2), beam_width=0)
    with pytest.raises(ValueError, match=r"\[F, K\]"):
        prefix_beam_search(torch.zeros(2, 3, 2))
    with pytest.raises(ValueError, match=r"\[B, F, K\]"):
        greedy_decode(torch.zeros(3, 2))


def test_pad_sequences():
    assert pad_sequences([[1, 2], [], [3]]).tolist() == [[1, 2], [-1, -1], [3, -1]]
    assert pad_sequences([[], []]).tolist() == [[-1], [-1]]
