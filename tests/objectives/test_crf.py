"""The linear-chain CRF (`objective.crf=true`): its sums, best paths and marginals against enumerating every label
sequence, its loss against cross-entropy when it has learned nothing, errors on bad input, that it learns what
label pairs carry and a per-token classifier cannot, and the tagging recipe trained and predicting with it."""

import itertools
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqattn.objectives import SequenceLabeling
from seqattn.objectives.crf import LinearChainCRF
from seqattn.run import train

IGNORE = -100


def _crf(num_tags: int, seed: int, spread: float = 2.0) -> LinearChainCRF:
    torch.manual_seed(seed)
    crf = LinearChainCRF(num_tags)
    with torch.no_grad():
        for p in crf.parameters():
            p.normal_(0.0, spread)
    return crf


def _score(crf, em, b, path):
    s = crf.start[path[0]] + em[b, 0, path[0]]
    for t in range(1, len(path)):
        s = s + crf.transitions[path[t - 1], path[t]] + em[b, t, path[t]]
    return s + crf.end[path[-1]]


def _enumerate(crf, em, mask, b):
    """Every label sequence of row b's real tokens and its score (a differentiable [S] tensor)."""
    n = int(mask[b].sum())
    paths = list(itertools.product(range(crf.num_tags), repeat=n))
    return paths, torch.stack([_score(crf, em, b, p) for p in paths])


def _batch(seed: int, num_tags: int = 3):
    torch.manual_seed(100 + seed)
    lengths = torch.tensor([5, 3, 1, 0])
    mask = torch.arange(5)[None] < lengths[:, None]  # [4, 5] prefixes, one empty row
    em = torch.randn(4, 5, num_tags) * 3
    em[~mask] = 1e4  # wild logits on padding must not matter
    return em, mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_log_partition_and_best_path_match_enumerating_every_sequence(seed):
    crf = _crf(3, seed)
    em, mask = _batch(seed)
    logz, best = crf.log_partition(em, mask), crf.decode(em, mask)
    assert best.shape == mask.shape and best.dtype == torch.long
    for b in range(3):
        paths, scores = _enumerate(crf, em, mask, b)
        assert float(logz[b]) == pytest.approx(float(torch.logsumexp(scores, 0)), abs=1e-4)
        assert best[b, : int(mask[b].sum())].tolist() == list(paths[int(scores.argmax())])
    assert float(logz[3]) == 0.0  # no real tokens: nothing to sum


@pytest.mark.parametrize("seed", [0, 1])
def test_loss_is_minus_log_p_gold_with_unlabelled_positions_summed_out_and_its_gradient(seed):
    crf = _crf(3, seed)
    em, mask = _batch(seed)
    em = em.requires_grad_(True)
    labels = torch.full(mask.shape, IGNORE)
    labels[0, :5] = torch.tensor([0, IGNORE, 2, 1, IGNORE])
    labels[1, :3] = torch.tensor([1, 2, 0])
    labels[2, 0] = 2
    loss = crf.nll(em, labels, mask)
    expected = 0.0
    for b in range(3):
        paths, scores = _enumerate(crf, em, mask, b)
        agree = torch.tensor([all(labels[b, t] == IGNORE or labels[b, t] == y for t, y in enumerate(p)) for p in paths])
        expected = expected + torch.logsumexp(scores, 0) - torch.logsumexp(scores[agree], 0)
    expected = expected / int((labels != IGNORE).sum())
    assert float(loss) == pytest.approx(float(expected), abs=1e-4)
    got = torch.autograd.grad(loss, [em, *crf.parameters()])
    want = torch.autograd.grad(expected, [em, *crf.parameters()])
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-4), (g - w).abs().max()


def test_with_nothing_learned_it_is_the_per_token_classifier():
    """Every CRF parameter at zero (its start): the loss is cross-entropy over the labelled tokens, the decoded
    labels each token's argmax, the marginals its softmax."""
    crf = LinearChainCRF(5)
    torch.manual_seed(3)
    em = torch.randn(6, 7, 5)
    mask = torch.arange(7)[None] < torch.tensor([7, 6, 4, 4, 2, 1])[:, None]
    labels = torch.randint(0, 5, (6, 7)).masked_fill(~mask, IGNORE)
    labels[0, 2] = IGNORE
    ce = F.cross_entropy(em.reshape(-1, 5), labels.flatten(), ignore_index=IGNORE)
    assert float(crf.nll(em, labels, mask)) == pytest.approx(float(ce), abs=1e-5)
    assert torch.equal(crf.decode(em, mask)[mask], em.argmax(-1)[mask])
    assert torch.allclose(crf.marginals(em, mask)[mask], em.softmax(-1)[mask], atol=1e-5)


def test_marginals_sum_to_one_and_match_enumeration_even_in_inference_mode():
    crf = _crf(3, 4)
    em, mask = _batch(4)
    with torch.inference_mode():
        marg = crf.marginals(em, mask)
    assert torch.allclose(marg.sum(-1), mask.float(), atol=1e-5)  # padding rows are 0
    for b in range(3):
        paths, scores = _enumerate(crf, em, mask, b)
        probs = scores.detach().softmax(0)
        for t in range(int(mask[b].sum())):
            want = torch.zeros(3).index_add(0, torch.tensor([p[t] for p in paths]), probs)
            assert torch.allclose(marg[b, t], want, atol=1e-4)
    assert all(p.grad is None for p in crf.parameters())


def test_bad_input_is_refused_with_the_reason():
    crf = LinearChainCRF(3)
    em = torch.zeros(2, 4, 3)
    holes = torch.tensor([[True, False, True, False], [True, True, False, False]])
    with pytest.raises(ValueError, match=r"prefix.*rows \[0\]"):
        crf.log_partition(em, holes)
    mask = torch.tensor([[True, True, False, False]] * 2)
    with pytest.raises(ValueError, match="padding positions"):
        crf.nll(em, torch.tensor([[0, 1, 2, IGNORE]] * 2), mask)
    with pytest.raises(ValueError, match=r"emissions \[B, L, 3\]"):
        crf.decode(torch.zeros(2, 4, 5), mask)
    with pytest.raises(ValueError, match="num_tags"):
        LinearChainCRF(0)
    assert float(crf.nll(em.requires_grad_(True), torch.full((2, 4), IGNORE), mask)) == 0.0  # nothing labelled


def test_it_learns_what_the_label_pairs_carry():
    """Every other token is a blank whose label names the label before it (tags 3-5 after 0-2): a per-token
    classifier can only guess there (~1/3), the CRF's transitions tag it."""
    torch.manual_seed(0)
    revealed, blank, length = 3, 3, 8
    tags = 2 * revealed

    def draw(n):
        shown = torch.randint(0, revealed, (n, length // 2))
        labels = torch.stack([shown, shown + revealed], 2).flatten(1)  # [n, L]: a, a + 3, b, b + 3, ...
        tokens = labels.clone()
        tokens[:, 1::2] = blank
        return tokens, labels

    def fit(with_crf: bool) -> float:
        torch.manual_seed(1)
        table = torch.nn.Embedding(revealed + 1, tags)
        crf = LinearChainCRF(tags)
        params = list(table.parameters()) + (list(crf.parameters()) if with_crf else [])
        opt = torch.optim.Adam(params, lr=0.1)
        mask = torch.ones(64, length, dtype=torch.bool)
        for _ in range(150):
            tokens, labels = draw(64)
            loss = crf.nll(table(tokens), labels, mask)
            opt.zero_grad()
            loss.backward()
            opt.step()
        tokens, labels = draw(500)
        pred = crf.decode(table(tokens), torch.ones(500, length, dtype=torch.bool))
        return float((pred[:, 1::2] == labels[:, 1::2]).float().mean())  # the blanks

    with_crf, without = fit(True), fit(False)
    print("blank accuracy with the CRF", with_crf, "without", without)
    assert with_crf > 0.99
    assert without < 0.5


def test_crf_refuses_what_acts_on_per_token_probabilities(compose_cfg):
    from hydra.utils import instantiate

    cfg = compose_cfg(["task=text_tagging", "data.synth.n_train=50", "data.synth.n_val=10", "data.synth.n_test=10",
                       "objective.crf=true", "objective.label_smoothing=0.1"])
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    from seqattn.run import build_objective, plan_run

    with pytest.raises(ValueError, match="label_smoothing=0.1"):
        build_objective(cfg, datamodule, plan_run(cfg, datamodule))
    cls = compose_cfg(["task=text_cls", "objective.crf=true"], run="cls")
    cls_data = instantiate(cls.data)
    cls_data.setup()
    with pytest.raises(ValueError, match="crf=true scores label sequences"):
        build_objective(cls, cls_data, plan_run(cls, cls_data))


def test_tagging_recipe_trains_decodes_and_predicts_with_a_crf(compose_cfg, tmp_path):
    cfg = compose_cfg(["task=text_tagging", "data.synth.n_train=300", "data.synth.n_val=40", "data.synth.n_test=60",
                       "data.batch_size=32", "model.dim=32", "model.depth=1", "model.heads=2", "trainer.max_epochs=3",
                       "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
                       "callbacks.early_stopping=null", "objective.crf=true", "plot=false"])
    metrics = train(cfg)
    out = Path(metrics["output_dir"])
    saved = json.loads((out / "metrics.json").read_text())
    model = SequenceLabeling.load_from_checkpoint(out / "checkpoints" / "best.ckpt", map_location="cpu")
    assert model.crf is not None and model.crf.transitions.abs().sum() > 0  # trained and saved
    decayed = [p for g in model.parameter_groups() if g["weight_decay"] > 0 for p in g["params"]]
    assert not any(p is model.crf.transitions for p in decayed)  # label-pair scores are not pulled to zero
    from hydra.utils import instantiate

    datamodule = instantiate(cfg.data)
    datamodule.setup()
    model.eval()
    right = total = 0
    with torch.inference_mode():
        for i, batch in enumerate(datamodule.test_dataloader()):
            out_ = model(batch)
            decoded = model.crf.decode(out_["logits"], out_["mask"])
            keep = batch["labels"] != IGNORE
            right += int((decoded[keep] == batch["labels"][keep]).sum())
            total += int(keep.sum())
            pred = model.predict_step(batch, i)
            assert torch.equal(pred.values[out_["mask"]], decoded[out_["mask"]])
            assert torch.allclose(pred.probs.sum(-1)[out_["mask"]], torch.ones(()), atol=1e-5)
    assert saved["test/acc"] == pytest.approx(right / total, abs=1e-6)  # the test metric is the decoded sequence's
    assert saved["test/acc"] > 0.5

    # exported, the sidecar carries the label-pair scores: decoding the exported logits with them is the model's
    from seqattn.export import export

    path, inputs = export(out / "checkpoints" / "best.ckpt", "torchscript", tmp_path / "model.ts")
    sidecar = json.loads((tmp_path / "model.ts.json").read_text())
    assert "Viterbi" in sidecar["outputs"][0]["meaning"]
    copy = LinearChainCRF(len(sidecar["labels"]))
    with torch.no_grad():
        for name in ("transitions", "start", "end"):
            getattr(copy, name).copy_(torch.tensor(sidecar["crf"][name]))
    logits, mask = torch.jit.load(str(path))(*inputs)
    assert torch.equal(copy.decode(logits, mask)[mask], model.crf.decode(logits, mask)[mask])
    assert torch.equal(copy.transitions, model.crf.transitions.detach())
