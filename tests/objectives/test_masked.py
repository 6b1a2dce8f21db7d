"""Masked-token modelling (:mod:`seqattn.objectives.masked`) on a toy adapter: what is hidden, what is
scored, what the encoder sees, and that the hidden tokens' loss falls."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from seqattn.core.tokens import Tokens
from seqattn.model.protocols import AdapterBase, TargetLayout, TokenTargets
from seqattn.objectives.masked import MaskedModelling, choose_hidden, content_scores

V, D = 12, 16


class ToyAdapter(AdapterBase):
    """``ids [B, L]`` (0 = padding) -> embeddings; targets: the id (class) or its one-hot features
    (regression), maskable on real tokens."""

    inputs = ("ids", "mask")

    def __init__(self, dim: int, kind: str = "class") -> None:
        super().__init__()
        self.kind = kind
        self.embedding = nn.Embedding(V, dim)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> Tokens:
        return Tokens(x=self.embedding(ids) * mask.unsqueeze(-1), mask=mask)

    def token_target_layout(self) -> TargetLayout:
        return TargetLayout(self.kind, V)

    def token_targets(self, batch: dict) -> TokenTargets:
        ids, mask = batch["ids"], batch["mask"]
        values = ids if self.kind == "class" else torch.nn.functional.one_hot(ids, V).float()
        if self.kind == "binary":  # several present at once: the id and the next one
            values = (values + torch.nn.functional.one_hot((ids + 1) % V, V).float()).clamp(max=1)
        return TokenTargets(self.kind, values, mask, V)


class Silent(AdapterBase):
    inputs = ("ids",)

    def forward(self, ids):
        return Tokens(x=torch.zeros(*ids.shape, D))


def _objective(kind: str = "class", ratio: float = 0.3, span: int = 1, global_token: bool = False) -> MaskedModelling:
    torch.manual_seed(0)
    net = {"_target_": "seqattn.model.network.SequenceModel", "global_token": global_token,
           "adapter": {"_target_": f"{__name__}.ToyAdapter", "dim": D, "kind": kind},
           "encoder": {"_target_": "seqattn.core.Encoder", "dim": D, "depth": 1, "heads": 2, "dropout": 0.0},
           "head": {"_target_": "seqattn.model.heads.TokenHead", "dim": D}}
    return MaskedModelling(net=net, mask_ratio=ratio, span=span, optimizer={"_target_": "torch.optim.Adam", "lr": 3e-3})


def _batch(b: int = 6, length: int = 10, seed: int = 1) -> dict:
    """Ids 1..V-1 with padding (0) after each sequence's length; the id at l is (l + first) mod, so a
    hidden token is predictable from its neighbours."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, length + 1, (b,), generator=g)
    lengths[0] = length
    first = torch.randint(1, V, (b, 1), generator=g)
    ids = (first + torch.arange(length)) % (V - 1) + 1  # [B, L] in 1..V-1
    mask = torch.arange(length)[None] < lengths[:, None]
    return {"ids": ids.masked_fill(~mask, 0), "mask": mask}


def test_hidden_positions_are_maskable_ones_in_the_asked_number_and_spans():
    g = torch.Generator().manual_seed(0)
    maskable = torch.arange(40)[None] < torch.tensor([40, 25, 7, 1, 0])[:, None]  # [5, 40], padding after
    maskable[0, 0] = False  # e.g. a position the adapter does not offer
    for _ in range(20):
        hide = choose_hidden(maskable, 0.15, 1, g)
        assert not (hide & ~maskable).any()  # never padding, never a non-maskable token
        n = maskable.sum(1)
        assert hide.sum(1).tolist() == [min(int(k), math.ceil(0.15 * int(k))) for k in n]  # 6, 4, 2, 1, 0
    assert torch.equal(choose_hidden(maskable, 1.0, 1, g), maskable)  # everything maskable, nothing else
    spans = choose_hidden(torch.ones(1, 60, dtype=torch.bool), 0.1, 3, g)[0].int().tolist()
    runs = "".join(map(str, spans)).split("0")
    assert sum(spans) >= 3 and all(len(r) % 3 == 0 for r in runs if r)  # runs of 3 (touching runs merge)


def test_padding_and_the_global_token_are_never_hidden_or_scored():
    model = _objective(ratio=1.0, global_token=True)  # hide every maskable token
    batch = _batch()
    out = model(batch)
    assert torch.equal(out["hide"], batch["mask"])  # all real tokens, no padding
    assert out["logits"].shape[:2] == batch["mask"].shape  # the global token is not among the predictions


def test_unhidden_positions_are_never_scored():
    model = _objective(ratio=0.3)
    model.eval()
    batch = _batch()
    out = model(batch)
    logits = out["logits"].detach().requires_grad_(True)
    loss = model.loss({**out, "logits": logits}, batch)
    loss.backward()
    hide = out["hide"]
    assert hide.any() and (~hide & batch["mask"]).any()
    assert logits.grad[~hide].abs().sum() == 0  # no gradient at an unhidden position ...
    assert logits.grad[hide].abs().sum(-1).gt(0).all()  # ... and some at every hidden one
    changed = logits.detach().clone()
    changed[~hide] = torch.randn_like(changed[~hide]) * 10  # other predictions where nothing was hidden
    assert torch.equal(model.loss({**out, "logits": changed}, batch), loss.detach())
    assert model.loss_weight(out, batch) == int(hide.sum())


def test_targets_come_from_the_clean_batch_before_masking():
    model = _objective(ratio=0.5)
    batch = _batch()
    clean = {k: v.clone() for k, v in batch.items()}
    out = model(batch)
    hide, targets = out["hide"], out["targets"]
    assert torch.equal(targets.values[hide], clean["ids"][hide])  # the hidden tokens' own ids, not a mask id
    assert all(torch.equal(batch[k], clean[k]) for k in clean)  # the batch is not edited
    preds, wanted = model.predictions(out, batch)
    assert torch.equal(wanted, clean["ids"][hide]) and preds.shape == wanted.shape


def test_the_encoder_sees_the_mask_vector_at_hidden_positions_and_the_tokens_elsewhere():
    model = _objective(ratio=0.4)
    model.eval()
    batch = _batch()
    seen = {}
    model.net.encoder.register_forward_pre_hook(lambda mod, args: seen.update(x=args[0].x.detach().clone()))
    out = model(batch)
    hide, clean = out["hide"], model.net.adapter(batch["ids"], batch["mask"]).x.detach()
    vector = model.mask_vector.detach()
    assert torch.equal(seen["x"][hide], vector.expand(int(hide.sum()), D))
    keep = batch["mask"] & ~hide
    assert torch.equal(seen["x"][keep], clean[keep])
    # so a hidden token's identity cannot reach the prediction: another id there changes nothing
    other = dict(batch, ids=batch["ids"].masked_fill(hide, 5))
    torch.testing.assert_close(model(other, hide=hide)["logits"], out["logits"], rtol=0, atol=0)


def test_evaluation_hides_the_same_positions_in_any_batch_and_training_draws_anew():
    model = _objective()
    model.eval()
    batch = _batch()
    first = model(batch)["hide"]
    assert torch.equal(model(batch)["hide"], first)  # every epoch the same
    reordered = {k: v.flip(0)[:3] for k, v in batch.items()}  # other batch-mates, another order, less padding
    width = int(reordered["mask"].sum(1).max())
    reordered = {k: v[:, :width] for k, v in reordered.items()}
    assert torch.equal(model(reordered)["hide"], first.flip(0)[:3, :width])
    model.train()
    assert not all(torch.equal(model(batch)["hide"], first) for _ in range(3))


def test_evaluation_hides_the_same_frames_when_regression_targets_move_by_float_rounding():
    """Log-mel frames computed by another BLAS differ by ~1e-6: the evaluation sample must not move."""
    g = torch.Generator().manual_seed(0)
    b, length, f = 64, 100, 40
    values = 6 + 2 * torch.randn(b, length, f, generator=g)  # [B, L, F] like log-mel frames
    maskable = torch.arange(length).unsqueeze(0) < torch.randint(20, length + 1, (b, 1), generator=g)  # [B, L]
    nudged = values + (torch.rand(values.shape, generator=g) - 0.5) * 1e-5  # |change| <= 5e-6
    hide = [choose_hidden(maskable, 0.3, scores=content_scores(TokenTargets("regression", v, maskable, f), seed=3))
            for v in (values, nudged)]
    assert torch.equal(hide[0], hide[1])
    # still a draw per sequence, not one pattern for every sequence of a length
    every = torch.ones(b, length, dtype=torch.bool)
    full = choose_hidden(every, 0.3, scores=content_scores(TokenTargets("regression", values, every, f)))
    assert len({tuple(row.nonzero().flatten().tolist()) for row in full}) == b


@pytest.mark.parametrize("kind", ["class", "regression", "binary"])
def test_the_hidden_tokens_loss_falls_on_a_small_run(kind):
    model = _objective(kind, ratio=0.3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batches = [_batch(16, 12, seed) for seed in range(2)]
    model.eval()
    with torch.no_grad():
        before = sum(float(model.loss(model(b), b)) for b in batches)
    model.train()
    for _ in range(25):
        for b in batches:
            loss = model.loss(model(b), b)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        after = sum(float(model.loss(model(b), b)) for b in batches)
    assert after < 0.7 * before, (before, after)


def test_regression_targets_are_scored_by_squared_error_and_report_no_accuracy():
    model = _objective("regression", ratio=0.5)
    batch = _batch()
    out = model(batch)
    hide = out["hide"]
    want = torch.nn.functional.one_hot(batch["ids"], V).float()[hide]
    torch.testing.assert_close(model.loss(out, batch), ((out["logits"][hide] - want) ** 2).mean())
    assert dict(model.make_metrics().items()) == {}


def test_binary_targets_are_scored_by_binary_cross_entropy_per_feature_on_hidden_tokens_only():
    model = _objective("binary", ratio=0.5)
    batch = _batch()
    out = model(batch)
    hide = out["hide"]
    want = out["targets"].values[hide]  # [N, V] 0/1, two present per token
    assert want.sum(-1).eq(2).all() and out["targets"].kind == "binary"
    p = torch.sigmoid(out["logits"][hide])
    expected = -(want * torch.log(p) + (1 - want) * torch.log(1 - p)).mean()
    torch.testing.assert_close(model.loss(out, batch), expected)
    assert dict(model.make_metrics().items()) == {} and model.predictions(out, batch)[0].numel() == 0
    with pytest.raises(ValueError, match="binary TokenTargets.values must lie in \\[0, 1\\]"):
        TokenTargets("binary", torch.full((2, 3, 4), 2.0), torch.ones(2, 3, dtype=torch.bool), 4)


def test_bad_settings_and_an_adapter_without_targets_are_clear_errors():
    with pytest.raises(ValueError, match="mask_ratio must be in"):
        _objective(ratio=0.0)
    with pytest.raises(ValueError, match="span must be an int"):
        _objective(span=0)
    net = {"_target_": "seqattn.model.network.SequenceModel", "adapter": {"_target_": f"{__name__}.Silent"},
           "encoder": {"_target_": "seqattn.core.Encoder", "dim": D, "depth": 1, "heads": 2},
           "head": {"_target_": "seqattn.model.heads.TokenHead", "dim": D}}
    with pytest.raises(ValueError, match="adapter Silent declares no token targets"):
        MaskedModelling(net=net)
    with pytest.raises(ValueError, match="Silent declares no token targets"):
        Silent().token_targets({})
    with pytest.raises(ValueError, match="values must be"):
        TokenTargets("class", torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), 4)
    with pytest.raises(ValueError, match="kind='frames' is not one of"):
        TargetLayout("frames", 3)


def test_a_pretraining_model_has_nothing_to_predict_with():
    model = _objective()
    with pytest.raises(ValueError, match="pretraining checkpoint.*fine-tune it first"):
        model.predict_step(_batch(), 0)


def _prior_loss(kind: str, batches: list[dict], out: dict) -> torch.Tensor:
    """The loss of predicting, at every hidden token of ``out``, the training targets' mean over every real
    (maskable) token of ``batches`` -- padding left out -- computed here from the targets themselves."""
    adapter = ToyAdapter(D, kind)
    every = [adapter.token_targets(b) for b in batches]
    values = torch.cat([t.values[t.maskable] for t in every])  # [N] or [N, V]: real tokens only
    hide, wanted = out["hide"], out["targets"].values[out["hide"]]
    if kind == "class":
        freq = torch.bincount(values, minlength=V).float() / values.numel()  # [V]
        return -freq.log()[wanted].mean()
    mean = values.float().mean(0)  # [V]
    if kind == "binary":
        return -(wanted * mean.log() + (1 - wanted) * (1 - mean).log()).mean()
    return ((wanted - mean) ** 2).mean()


@pytest.mark.parametrize("kind", ["class", "regression", "binary"])
def test_prior_bias_starts_the_head_at_the_training_targets_prior(kind):
    """Before the first step the hidden tokens' loss is the prior's: the best constant prediction from the
    training targets' frequencies (log-odds for binary), the same for every token whatever the encoder says."""
    model = _objective(kind, ratio=0.5)
    batches = [_batch(8, 10, seed) for seed in range(3)]  # padding in each: it must not count
    model.set_prior(model.target_prior(batches))
    model.eval()
    # class 0 (padding's id) is never a target: it gets half an observation, not a logit of -inf, which costs
    # the other classes log(1 + 0.5 / n) ~ 0.003 nats
    tolerance = {"rtol": 1e-2, "atol": 0.0} if kind == "class" else {"rtol": 1e-5, "atol": 1e-6}
    for b in batches:
        out = model(b)
        torch.testing.assert_close(model.loss(out, b), _prior_loss(kind, batches, out), **tolerance)
        logits = out["logits"][b["mask"]]
        assert torch.equal(logits, logits[:1].expand_as(logits))  # one constant prediction: the prior
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(30):  # and the network can move away from it (the weight was zeroed, not frozen)
        loss = model.loss(model(batches[0]), batches[0])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(model.output_layer().weight.detach().abs().sum()) > 0


def test_prior_bias_is_set_when_training_starts_from_the_training_batches_only():
    import lightning as L
    from torch.utils.data import DataLoader

    model = _objective("binary", ratio=0.5)
    model.prior_bias = True
    items = [{k: v[i] for k, v in _batch(12, 10, 7).items()} for i in range(12)]
    loader = DataLoader(items, batch_size=4, shuffle=False)
    seen = {}

    class Spy(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == 0:
                layer = module.output_layer()
                seen.update(bias=layer.bias.detach().clone(), weight=float(layer.weight.abs().sum()))

    trainer = L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Spy()])
    trainer.fit(model, train_dataloaders=loader)
    every = [ToyAdapter(D, "binary").token_targets(b) for b in loader]
    mean = torch.cat([t.values[t.maskable] for t in every]).mean(0)
    torch.testing.assert_close(seen["bias"], torch.logit(mean))
    assert seen["weight"] == 0.0
    off = _objective("binary", ratio=0.5)  # off by default: the head keeps its random start
    assert float(off.output_layer().weight.detach().abs().sum()) > 0 and not off.prior_bias


def test_the_prior_pass_leaves_the_runs_random_streams_where_they_were():
    """prior_bias reads training batches through an extra pass over the (shuffled) loader before training: the
    run's first batches and its masking draws must be those of the same run without it."""
    import random

    import lightning as L
    import numpy as np
    from torch.utils.data import DataLoader

    items = [{k: v[i] for k, v in _batch(24, 10, 7).items()} for i in range(24)]

    class Drawing(torch.utils.data.Dataset):  # an augmenting dataset: numpy and python draws per item
        def __len__(self):
            return len(items)

        def __getitem__(self, i):
            np.random.rand(), random.random()
            return items[i]

    def fit(prior_bias: bool) -> tuple[list[torch.Tensor], list[float]]:
        L.seed_everything(0)
        model = _objective("binary", ratio=0.5)
        model.prior_bias = prior_bias
        seen, draws = [], []

        class Spy(L.Callback):
            def on_train_batch_start(self, trainer, module, batch, batch_idx):
                seen.append(batch["ids"].clone())
                draws.append((torch.rand(()).item(), float(np.random.rand()), random.random()))

        trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=[Spy()])
        trainer.fit(model, train_dataloaders=DataLoader(Drawing(), batch_size=4, shuffle=True))
        return seen, draws

    with_prior, without = fit(True), fit(False)
    assert len(with_prior[0]) == 3
    for a, b in zip(with_prior[0], without[0]):
        assert torch.equal(a, b)  # the same shuffled order
    assert with_prior[1] == without[1]  # torch, numpy and python draws at each step: the same


def test_scaled_cosine_error_scores_direction_not_scale():
    model = _objective("regression", ratio=0.5)
    model.regression_loss, model.cosine_gamma = "cosine", 3.0
    batch = _batch()
    out = model(batch)
    hide = out["hide"]
    predicted, wanted = out["logits"][hide], out["targets"].values[hide]
    cos = (predicted * wanted).sum(-1) / (predicted.norm(dim=-1) * wanted.norm(dim=-1))  # per hidden token
    torch.testing.assert_close(model.loss(out, batch), ((1 - cos) ** 3).mean())
    scaled = dict(out, logits=out["logits"] * torch.rand(out["logits"].shape[:2] + (1,)).add(0.5))
    torch.testing.assert_close(model.loss(scaled, batch), model.loss(out, batch))  # each token's scale: no matter
    with pytest.raises(ValueError, match="regression_loss must be"):
        MaskedModelling(net=model.hparams.net, regression_loss="l1")
