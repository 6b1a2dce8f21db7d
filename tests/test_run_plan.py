"""The run plan: decisions taken from the data (epochs from ``budget.steps``, checkpoint selection without
a validation split) live in ``run_plan.json``, applied as arguments; ``config.yaml`` stays as composed."""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping
from omegaconf import OmegaConf, open_dict

from seqattn.configs import task_names
from seqattn.run import build_callbacks, distill_options, finetune_options, plan_inputs, run, train
from seqattn.training.callbacks import BestCheckpoint, MonitorGuard
from seqattn.training.checkpoint import read_checkpoint
from seqattn.training.distill import DistillOptions
from seqattn.training.finetune import FinetuneOptions
from seqattn.training.plan import Asked, Budget, RunPlan, make_plan, plan_batch_scale, read_plan, write_plan
from tests.workflows import QUIET, TASKS, compose

BUDGET = Budget(steps=100, min_epochs=1, max_epochs=1000, patience=0.2, min_patience=5)
NO_BUDGET = Budget(steps=None, min_epochs=1, max_epochs=1000, patience=0.2, min_patience=5)
ASKED = Asked(max_epochs=3, early_stopping=True, patience=8, monitor="val/acc", accumulate_grad_batches=1)
SIZES = {"train": 400, "val": 50, "test": 60}
KEEP_STOPPING = [q for q in QUIET if "early_stopping" not in q]  # quiet, with the recipe's early stopping


class Patience(EarlyStopping):
    """An early stopper whose ``_target_`` does not say "EarlyStopping": found by type all the same."""


# ---------------------------------------------------------------------------------------------
# the plan from typed inputs


def test_a_step_budget_plans_epochs_and_patience_and_a_given_value_wins():
    plan = make_plan(BUDGET, ASKED, SIZES, train_batches=13)
    assert (plan.max_epochs, plan.patience, plan.monitor, plan.early_stopping, plan.validate) == (8, 5, "val/acc",
                                                                                                 True, True)
    assert plan.budget_message == "budget.steps=100: 13 steps per epoch -> trainer.max_epochs=8, early-stopping patience 5"
    assert plan.selection_message is None and plan.trainer_arguments() == {"max_epochs": 8}
    accumulated = make_plan(BUDGET, Asked(3, True, 8, "val/acc", accumulate_grad_batches=2), SIZES, train_batches=13)
    assert accumulated.max_epochs == 15 and accumulated.budget.steps_per_epoch == 7  # ceil(13 / 2) steps an epoch
    clamped = make_plan(Budget(100, 1, 4, 0.5, 1), ASKED, SIZES, train_batches=13)
    assert (clamped.max_epochs, clamped.patience, clamped.capped) == (4, 1, True)  # 8 wanted; patience <= 4 / 4
    given = make_plan(BUDGET, Asked(3, True, 2, "val/acc", 1, epochs_given=True, patience_given=True), SIZES, 13)
    assert (given.max_epochs, given.patience) == (3, 2)
    assert given.budget_message.endswith("-> trainer.max_epochs=3 (given), early-stopping patience 2 (given)")
    no_stopper = make_plan(BUDGET, Asked(3, False, None, "val/acc", 1), SIZES, 13)
    assert no_stopper.patience is None and no_stopper.budget_message.endswith("trainer.max_epochs=8")
    unbudgeted = make_plan(NO_BUDGET, ASKED, SIZES)
    assert (unbudgeted.max_epochs, unbudgeted.patience, unbudgeted.budget_message) == (3, None, None)
    for bad, message in ((Budget(-5, 1, 1000, 0.2, 5), r"budget.steps=-5 must be a positive number"),
                         (Budget(0, 1, 1000, 0.2, 5), r"budget.steps=0 must be a positive number"),
                         (Budget(100, -1, 1000, 0.2, 5), r"budget.min_epochs=-1 must be an int >= 1"),
                         (Budget(100, 1, 0, 0.2, 5), r"budget.max_epochs=0 must be an int >= 1"),
                         (Budget(100, 1, 1000, 0.0, 5), r"budget.patience=0.0 must be > 0"),
                         (Budget(100, 1, 1000, 0.2, -2), r"budget.min_patience=-2 must be an int >= 0")):
        with pytest.raises(ValueError, match=message):
            make_plan(bad, ASKED, SIZES, train_batches=13)


def test_without_validation_the_last_epoch_is_kept_and_a_bad_monitor_is_an_error():
    plan = make_plan(BUDGET, ASKED, {"train": 400, "val": 0, "test": 60}, train_batches=13)
    assert (plan.monitor, plan.early_stopping, plan.validate) == (None, False, False)
    assert plan.selection_message == (
        "no validation examples (splits: {'train': 400, 'val': 0, 'test': 60}): training for all 8 epochs without "
        "early stopping and keeping the last epoch as best.ckpt instead of choosing by val/acc")
    assert plan.trainer_arguments() == {"max_epochs": 8, "limit_val_batches": 0, "num_sanity_val_steps": 0}
    null = make_plan(NO_BUDGET, Asked(3, True, 8, None, 1), SIZES)
    assert (null.monitor, null.early_stopping, null.validate) == (None, False, True)
    assert null.selection_message == "objective.monitor=null: training for all 3 epochs, keeping the last epoch"
    on_train = make_plan(BUDGET, Asked(3, True, 8, "train/loss_epoch", 1), {"train": 9, "val": 0}, train_batches=1)
    assert (on_train.monitor, on_train.early_stopping, on_train.selection) == ("train/loss_epoch", True, None)
    with pytest.raises(ValueError, match=r"objective.monitor='val/acc' but the data has no validation examples"):
        make_plan(BUDGET, Asked(3, True, 8, "val/acc", 1, monitor_given=True), {"train": 9, "val": 0}, 1)
    with pytest.raises(ValueError, match="never on the test split"):
        make_plan(NO_BUDGET, Asked(3, True, 8, "test/acc", 1), SIZES)


def test_the_plan_round_trips_through_run_plan_json_and_takes_a_later_given_value(tmp_path):
    plan = make_plan(BUDGET, ASKED, {"train": 400, "val": 0, "test": 60}, train_batches=13)
    path = write_plan(tmp_path, plan)
    assert path.name == "run_plan.json"
    saved = json.loads(path.read_text())
    assert saved["max_epochs"] == 8 and saved["monitor"] is None and saved["validate"] is False
    assert saved["messages"] == {"budget": plan.budget_message, "selection": plan.selection_message}
    assert read_plan(tmp_path) == plan
    longer = plan.given(max_epochs=12)
    assert longer.max_epochs == 12 and longer.patience == 5
    assert "trainer.max_epochs=12 (given)" in longer.budget_message and "all 12 epochs" in longer.selection_message
    assert read_plan(tmp_path / "elsewhere") is None  # a run written before run plans
    path.write_text('{"version": 1, "max_epochs": 3}')
    with pytest.raises(ValueError, match="run_plan.json: not a run plan"):
        read_plan(tmp_path)


# ---------------------------------------------------------------------------------------------
# a training split too small for budget.steps, and the recipes' plans on their built-in data

# every recipe's (max_epochs, patience) on its built-in data: epochs from budget.steps (image, molecule) or
# trainer.max_epochs, patience None = the recipe's early stopper's own. A new recipe adds its line here.
DEFAULT_PLANS = {"image": (12, 5), "image_pretrain": (5, None), "molecule": (70, 70), "molecule_pretrain": (10, None),
                 "social": (200, None), "social_pretrain": (200, None), "speech": (40, None), "speech_cls": (20, None), "speech_ctc": (20, None),
                 "speech_pretrain": (20, None), "text_cls": (15, None), "text_pretrain": (15, None),
                 "text_tagging": (20, None)}
# training examples of the built-in data where budget.steps makes the epochs: the shapes' data.shapes.n_train,
# the 3,993 training molecules of RDKit's NCI set (4,991 readable, random 80/10/10)
BUILT_IN_TRAIN = {"image": lambda cfg: cfg.data.shapes.n_train, "molecule": lambda cfg: 3993}


def _recipe_plan(task: str, tmp_path: Path, n_train: int | None = None, overrides: list[str] = ()) -> RunPlan:
    """The plan of ``task``'s recipe on ``n_train`` training examples (None: its built-in data's)."""
    cfg = compose([f"task={task}", *overrides], tmp_path / task, tmp_path / "data")
    budget, asked = plan_inputs(cfg)
    if n_train is None and budget.steps:
        n_train = BUILT_IN_TRAIN[task](cfg)
    batches = None if n_train is None else math.ceil(n_train / cfg.data.batch_size)
    scale = plan_batch_scale(budget, asked, batches)  # as seqattn.run.plan_run: recounted at the scaled batch
    batches = batches if scale == 1 else math.ceil(n_train / (cfg.data.batch_size * scale))
    return make_plan(budget, asked, {"train": n_train or 1, "val": 1, "test": 1}, batches, batch_scale=scale)


def test_the_recipes_plans_on_their_built_in_data_are_unchanged(tmp_path):
    assert sorted(DEFAULT_PLANS) == task_names()
    plans = {task: _recipe_plan(task, tmp_path) for task in task_names()}
    assert {task: (plan.max_epochs, plan.patience) for task, plan in plans.items()} == DEFAULT_PLANS
    assert not any(plan.capped for plan in plans.values())
    assert all(plan.batch_scale == 1 for plan in plans.values())
    freesolv = _recipe_plan("molecule", tmp_path, n_train=514)  # the recipe's real set: 17 batches, 2,500 steps
    assert (freesolv.max_epochs, freesolv.patience, freesolv.capped) == (148, 148, False)
    lipophilicity = _recipe_plan("molecule", tmp_path, n_train=3360)  # 105 batches: 24 epochs of steps, raised to 70
    assert (lipophilicity.max_epochs, lipophilicity.patience) == (70, 70)
    assert "budget.min_epochs=70" in lipophilicity.budget_message
    thousand = _recipe_plan("molecule", tmp_path, n_train=800)  # 25 batches: 100 epochs of steps, above the floor
    assert (thousand.max_epochs, thousand.patience) == (100, 100)
    # budget.batch_scale=2 on FreeSolv (not the default): 9 batches of 64, 1,250 steps -> 139 epochs
    scaled = _recipe_plan("molecule", tmp_path, n_train=514, overrides=["budget.batch_scale=2"])
    assert (scaled.max_epochs, scaled.patience, scaled.batch_scale) == (139, 139, 2)
    assert scaled.budget_message.startswith(
        "budget.steps=1250 (budget.batch_scale=2: batches 2x data.batch_size and 2x the learning rate for the "
        "configured steps / 2): "
        "9 steps per epoch -> trainer.max_epochs=139")
    assert _recipe_plan("molecule", tmp_path, n_train=3360, overrides=["budget.batch_scale=2"]).batch_scale == 1


def test_a_training_split_too_small_for_the_budget_gets_bounded_epochs_and_patience_and_the_reason(tmp_path):
    images = _recipe_plan("image", tmp_path, n_train=40)  # 2 batches: 3750 steps would be 1875 epochs
    assert (images.max_epochs, images.patience, images.capped) == (300, 60, True)  # patience 0.2 of them
    assert images.budget_message == (
        "budget.steps=3750: 2 steps per epoch -> trainer.max_epochs=300 (the budget wants 1875 epochs of a training "
        "split this small: capped at budget.max_epochs=300; trainer.max_epochs=N to choose), early-stopping patience 60")
    molecules = _recipe_plan("molecule", tmp_path, n_train=36)  # the recipe's patience 1.0: bounded to a quarter
    assert (molecules.max_epochs, molecules.patience, molecules.capped) == (300, 75, True)
    assert molecules.budget_message.endswith("early-stopping patience 75 (capped at 0.25 of the epochs)")
    assert read_plan(write_plan(tmp_path, molecules).parent) == molecules
    given = make_plan(Budget(5000, 1, 300, 1.0, 5), Asked(7, True, 8, "val/loss", 1, epochs_given=True), SIZES, 2)
    assert given.max_epochs == 7 and not given.capped and "(given)" in given.budget_message


def test_the_batch_scale_applies_only_where_the_step_budget_sets_the_epochs(tmp_path):
    scaled = Budget(steps=100, min_epochs=2, max_epochs=30, patience=0.2, min_patience=5, batch_scale=2)
    assert plan_batch_scale(scaled, ASKED, 13) == 2  # 8 epochs of steps: above the floor of 2, below the cap
    assert plan_batch_scale(scaled, ASKED, 60) == 1  # 2 epochs of steps: the floor sets them (a large set)
    assert plan_batch_scale(scaled, ASKED, 3) == 1  # 34 epochs wanted, capped at 30 (a set too small for the budget)
    assert plan_batch_scale(scaled, Asked(3, True, 8, "val/acc", 1, batch_given=True), 13) == 1  # given: as given
    assert plan_batch_scale(scaled, Asked(3, True, 8, "val/acc", 1, epochs_given=True), 13) == 1
    assert plan_batch_scale(replace(scaled, steps=None), ASKED, 13) == 1
    assert plan_batch_scale(replace(scaled, batch_scale=1), ASKED, 13) == 1
    plan = make_plan(scaled, ASKED, SIZES, train_batches=7, batch_scale=2)  # 7 batches of the scaled size
    assert (plan.max_epochs, plan.budget.steps, plan.batch_scale) == (8, 50, 2)  # ceil(50 / 7) epochs
    assert "batch and learning rate x2 (budget.batch_scale)" in plan.describe()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=rf"budget.batch_scale={bad!r} must be an int >= 1"):
            plan_batch_scale(replace(scaled, batch_scale=bad), ASKED, 13)
    with pytest.raises(ValueError, match=r"budget.batch_scale=0 must be an int >= 1"):  # read from the YAML, before data
        plan_inputs(_cfg(tmp_path, ["budget.batch_scale=0"]))


def test_a_scaled_run_trains_larger_batches_at_a_scaled_learning_rate_and_resume_keeps_them(tmp_path, caplog):
    """text_cls's test data (no batch size or epochs given) with budget.steps=100 (more epochs than the floor of 1):
    budget.batch_scale=2 trains
    batches twice data.batch_size at twice the learning rate for 50 steps; the plan says so, the composed config is
    unchanged and a resumed run keeps both. data.batch_size or the lr on the command line keep both as given."""
    from hydra.utils import instantiate

    import seqattn.run as run_module

    run_dir, data = tmp_path / "run", tmp_path / "data"
    small = [o for o in TASKS["text_cls"].overrides if not o.startswith(("data.batch_size=", "trainer.max_epochs="))]
    overrides = small + KEEP_STOPPING + ["budget.steps=100", "budget.batch_scale=2"]  # neither given
    cfg = compose(overrides, run_dir, data)
    configured_batch, configured_lr = cfg.data.batch_size, cfg.objective.optimizer.lr
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    unscaled = run_module.plan_run(compose(overrides[:-1], run_dir, data), datamodule)
    plan = run_module.plan_run(cfg, datamodule)
    per_epoch = math.ceil(SIZES_OF(datamodule) / (2 * configured_batch))
    assert unscaled.max_epochs > 1 and unscaled.batch_scale == 1  # the step budget sets the epochs here
    assert (plan.batch_scale, plan.budget.steps, plan.budget.steps_per_epoch) == (2, 50, per_epoch)
    assert plan.max_epochs == math.ceil(50 / per_epoch)
    assert datamodule.batch_size == configured_batch  # planning leaves the datamodule as it was
    for given in ("data.batch_size", "objective.optimizer.lr"):
        assert run_module.plan_run(cfg, datamodule, given=lambda key, given=given: key == given).batch_scale == 1

    seen = []

    class Spy(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen.append((len(batch["labels"]), trainer.optimizers[0].param_groups[0]["initial_lr"]))

    built = run_module.build_callbacks
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "build_callbacks", lambda cfg, plan: built(cfg, plan) + [Spy()])
        train(cfg)
        assert max(b for b, _ in seen) == 2 * configured_batch
        assert all(lr == pytest.approx(2 * configured_lr) for _, lr in seen)
        saved = read_plan(run_dir)
        assert saved.batch_scale == 2 and json.loads((run_dir / "metrics.json").read_text())["budget"].startswith(
            "budget.steps=50 (budget.batch_scale=2")
        assert OmegaConf.load(run_dir / "config.yaml").data.batch_size == configured_batch  # as composed

        (run_dir / "metrics.json").unlink()
        seen.clear()
        with caplog.at_level(logging.INFO, logger="seqattn.run"):
            run(compose([f"resume={run_dir}", f"trainer.max_epochs={saved.max_epochs + 1}"], tmp_path / "ignored",
                        data))
    assert f"batches of {2 * configured_batch} (data.batch_size x 2)" in caplog.text
    assert seen and max(b for b, _ in seen) == 2 * configured_batch
    assert all(lr == pytest.approx(2 * configured_lr) for _, lr in seen) and read_plan(run_dir).batch_scale == 2


def SIZES_OF(datamodule) -> int:  # noqa: N802 -- the training split's size
    return datamodule.split_sizes()["train"]


# ---------------------------------------------------------------------------------------------
# the plan applied as arguments; options read once, from the YAML


def _cfg(tmp_path, overrides=()):
    return compose(TASKS["text_cls"].overrides + KEEP_STOPPING + list(overrides), tmp_path / "run", tmp_path / "data")


def test_callbacks_follow_the_plan_and_an_early_stopper_is_found_by_type(tmp_path):
    cfg = _cfg(tmp_path, ["+callbacks.stopper._target_=tests.test_run_plan.Patience", "+callbacks.stopper.monitor=val/acc"])
    before = OmegaConf.to_yaml(cfg)
    kept = build_callbacks(cfg, RunPlan(8, 5, "val/acc", early_stopping=True, validate=True))
    stoppers = [c for c in kept if isinstance(c, EarlyStopping)]
    assert len(stoppers) == 2 and {s.patience for s in stoppers} == {5}
    last = build_callbacks(cfg, RunPlan(8, 5, None, early_stopping=False, validate=False))
    assert not any(isinstance(c, EarlyStopping) for c in last)
    checkpoint = next(c for c in last if type(c) is BestCheckpoint)
    guard = next(c for c in last if isinstance(c, MonitorGuard))
    assert checkpoint.monitor is None and guard.monitor is None
    assert OmegaConf.to_yaml(cfg) == before  # nothing written into the config


def test_training_options_and_budget_come_from_the_yaml_and_a_missing_key_is_an_error(tmp_path):
    cfg = _cfg(tmp_path, ["finetune.pretrained_lr_mult=0.5", "distill.alpha=0.25", "freeze=[adapter]"])
    root = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "config.yaml")
    options = finetune_options(cfg)
    assert options == FinetuneOptions(None, ("adapter",), 0.5, root.finetune.resize_positional,
                                      adapter=OmegaConf.to_container(cfg.adapter, resolve=True))
    assert options.adapter["_target_"] == cfg.adapter._target_  # compared with an init_from checkpoint's
    assert distill_options(cfg) == DistillOptions(None, root.distill.temperature, 0.25)
    budget, asked = plan_inputs(cfg, given=lambda key: key == "trainer.max_epochs")
    assert budget == Budget(**OmegaConf.to_container(root.budget))
    assert asked == Asked(3, True, 8, "val/acc", 1, epochs_given=True)
    for key in ("budget.min_patience", "finetune.pretrained_lr_mult", "distill.temperature"):
        broken = _cfg(tmp_path)
        node, _, leaf = key.rpartition(".")
        with open_dict(broken):
            del OmegaConf.select(broken, node)[leaf]
        with pytest.raises(ValueError, match=rf"the run config has no {key}"):
            plan_inputs(broken), finetune_options(broken), distill_options(broken)
    for override, message in (("budget.max_epochs=null", "budget.max_epochs=None must be an int"),
                              ("budget.min_epochs=abc", "budget.min_epochs='abc' must be an int"),
                              ("budget.steps=1.5", "budget.steps=1.5 must be an int"),
                              ("budget.patience=true", "budget.patience=True must be a number")):
        with pytest.raises(ValueError, match=re.escape(message)):  # not int()'s TypeError or a silent truncation
            plan_inputs(_cfg(tmp_path, [override]))
    assert plan_inputs(_cfg(tmp_path, ["budget.steps=2000.0"]))[0].steps == 2000


# ---------------------------------------------------------------------------------------------
# end to end: config.yaml is the composed config, run_plan.json the derived values


def _composed(overrides, out: Path, data: Path) -> str:
    """``config.yaml`` as ``python -m seqattn.run <overrides> --cfg job --resolve`` composes it, with the run
    directory (``paths.output_dir``, Hydra's runtime output dir) and the data dir set as the tests set them."""
    return OmegaConf.to_yaml(compose(overrides, out, data), resolve=True)


def _assert_composed(run_dir: Path, overrides, data: Path, checkpoints=("best.ckpt", "last.ckpt")) -> None:
    """config.yaml, and the run config inside the ``checkpoints`` this run wrote, are the composed config."""
    composed = _composed(overrides, run_dir, data)
    assert (run_dir / "config.yaml").read_text() == composed
    for name in checkpoints:
        assert read_checkpoint(run_dir / "checkpoints" / name)["seqattn_config"] == OmegaConf.to_container(
            OmegaConf.create(composed))


def _patience(checkpoint: Path) -> list[int]:
    states = torch.load(checkpoint, weights_only=True)["callbacks"]
    return [state["patience"] for key, state in states.items() if key.startswith("EarlyStopping")]


def test_a_budgeted_run_saves_the_composed_config_and_its_plan_and_resume_reads_it_back(tmp_path, caplog):
    run_dir, data = tmp_path / "run", tmp_path / "data"
    overrides = TASKS["text_cls"].overrides + KEEP_STOPPING + ["budget.steps=100", "trainer.max_epochs=2"]
    metrics = train(compose(overrides, run_dir, data))
    _assert_composed(run_dir, overrides, data)  # budget.steps=100, trainer.max_epochs=2, patience 8
    plan = read_plan(run_dir)
    assert (plan.max_epochs, plan.patience, plan.budget.steps_per_epoch, plan.budget.epochs_given) == (2, 5, 13, True)
    assert metrics["budget"] == plan.budget_message == json.loads((run_dir / "metrics.json").read_text())["budget"]
    assert metrics["epochs"] == 2 and _patience(run_dir / "checkpoints" / "last.ckpt") == [5]

    # killed after its last checkpoint: resume continues under the saved plan (2 epochs), not a new one
    # (planned again, budget.steps=100 would give 8 epochs: trainer.max_epochs is not on this command line)
    (run_dir / "metrics.json").unlink()
    with caplog.at_level(logging.INFO, logger="seqattn.run"):
        run(compose([f"resume={run_dir}"], tmp_path / "ignored", data))
    assert json.loads((run_dir / "metrics.json").read_text())["epochs"] == 2 and read_plan(run_dir) == plan
    assert "run plan read back" in caplog.text
    resumed = overrides + [f"resume={run_dir}", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"]
    _assert_composed(run_dir, resumed, data, checkpoints=())  # nothing left to train: no checkpoint written

    # trainer.max_epochs on the resume's command line trains further, under the same plan otherwise
    run(compose([f"resume={run_dir}", "trainer.max_epochs=3"], tmp_path / "ignored", data))
    longer = read_plan(run_dir)
    assert longer == plan.given(max_epochs=3) and json.loads((run_dir / "metrics.json").read_text())["epochs"] == 3
    _assert_composed(run_dir, resumed + ["trainer.max_epochs=3"], data, checkpoints=())
    # the checkpoints keep the config the run was started with (Objective.on_load_checkpoint restores it)
    assert read_checkpoint(run_dir / "checkpoints" / "last.ckpt")["seqattn_config"] == OmegaConf.to_container(
        OmegaConf.create(_composed(overrides, run_dir, data)))

    # a run written before run plans (its config.yaml held the plan's values): planned again, those kept
    (run_dir / "metrics.json").unlink()
    (run_dir / "run_plan.json").unlink()
    legacy = OmegaConf.load(run_dir / "config.yaml")
    legacy.callbacks.early_stopping.patience = longer.patience
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(legacy))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="seqattn.run"):
        run(compose([f"resume={run_dir}"], tmp_path / "ignored", data))
    again = read_plan(run_dir)
    assert json.loads((run_dir / "metrics.json").read_text())["epochs"] == 3  # nothing trained beyond the plan
    assert (again.max_epochs, again.patience, again.monitor, again.early_stopping) == (3, 5, "val/acc", True)
    assert "no run_plan.json (a run written before run plans): planning it again" in caplog.text


def test_a_run_without_validation_saves_the_composed_config_and_the_selection_in_its_plan(tmp_path, caplog):
    run_dir, data = tmp_path / "run", tmp_path / "data"
    overrides = TASKS["text_cls"].overrides + KEEP_STOPPING + ["data.synth.n_val=0", "trainer.max_epochs=2"]
    with caplog.at_level(logging.WARNING, logger="seqattn.run"):
        metrics = train(compose(overrides, run_dir, data))
    _assert_composed(run_dir, overrides, data)  # objective.monitor=val/acc and the early stopper, as composed
    plan = read_plan(run_dir)
    assert (plan.max_epochs, plan.monitor, plan.early_stopping, plan.validate) == (2, None, False, False)
    assert metrics["selection"] == plan.selection_message and plan.selection_message in caplog.text
    assert "no validation examples" in plan.selection_message and metrics["epochs"] == 2
    best = read_checkpoint(run_dir / "checkpoints" / "best.ckpt")
    assert best["hyper_parameters"]["monitor"] is None and _patience(run_dir / "checkpoints" / "last.ckpt") == []
