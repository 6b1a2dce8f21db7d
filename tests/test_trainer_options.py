"""The ``trainer`` group is checked before any data is read: a mistyped value or a misspelt key is one
``ValueError`` naming the key, the value and what is expected (seqattn.training.options)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from seqattn.configs import CONFIG_DIR, task_names
from seqattn.run import train
from seqattn.training.options import check_trainer_options, describe, trainer_parameters
from tests.workflows import QUIET, TASKS, compose

TRAINER = CONFIG_DIR / "trainer"


def _group(name: str, task: str | None = None) -> dict:
    """conf/trainer/<name>.yaml over default.yaml, and the recipe's ``trainer:`` node over both, as Hydra
    composes them (the defaults list of the trainer group is only ``default``)."""
    merged = OmegaConf.load(TRAINER / "default.yaml")
    if name != "default":
        variant = OmegaConf.load(TRAINER / f"{name}.yaml")
        assert list(variant.pop("defaults")) == ["default"]
        merged = OmegaConf.merge(merged, variant)
    if task is not None:
        merged = OmegaConf.merge(merged, OmegaConf.load(CONFIG_DIR / "task" / f"{task}.yaml").get("trainer", {}))
    return OmegaConf.to_container(merged)


@pytest.mark.parametrize("name", sorted(p.stem for p in TRAINER.glob("*.yaml")))
def test_every_shipped_trainer_config_and_recipe_passes(name):
    for task in task_names():
        check_trainer_options(_group(name, task))


def _cfg(tmp_path, *overrides):
    """text_cls with a training file that does not exist: an error about the trainer shows that the
    options were checked before any data was read."""
    return compose(TASKS["text_cls"].overrides + QUIET + [f"data.train_path={tmp_path / 'missing.csv'}", *overrides],
                   tmp_path / "run", tmp_path / "data")


def test_a_mistyped_trainer_value_is_an_error_naming_key_value_and_type_before_any_data(tmp_path):
    cases = {
        "trainer.max_epochs=one": r"^trainer\.max_epochs='one' \(str\): expected an integer or null \(",
        "trainer.max_epochs=1.5": r"^trainer\.max_epochs=1\.5 \(float\): expected an integer or null",
        "trainer.enable_progress_bar=no": r"^trainer\.enable_progress_bar='no' \(str\): expected true or false or null",
        "trainer.precision=17": r"^trainer\.precision=17 \(int\): expected one of 64, 32, 16, .*'bf16-mixed'.* or null",
        "+trainer.accumulate_grad_batches=two": r"^trainer\.accumulate_grad_batches='two' \(str\): expected an integer",
    }
    for override, message in cases.items():
        with pytest.raises(ValueError) as err:
            train(_cfg(tmp_path, override))
        assert err.match(message), (override, str(err.value))
    good = _cfg(tmp_path, "trainer.precision=bf16-mixed", "trainer.max_time=00:00:10:00", "trainer.devices=[0]")
    with pytest.raises(ValueError, match="missing.csv does not exist"):  # valid options: on to the data (missing)
        train(good)


def test_an_unknown_trainer_key_names_the_closest_valid_key_and_all_of_them(tmp_path):
    with pytest.raises(ValueError) as err:  # +: what Hydra suggests for the typo trainer.max_epoch=1
        train(_cfg(tmp_path, "+trainer.max_epoch=1"))
    message = str(err.value)
    assert message.startswith("trainer.max_epoch=1: lightning.pytorch.Trainer has no option 'max_epoch'; "
                              "did you mean trainer.max_epochs? the trainer options are: accelerator, ")
    listed = message.split("the trainer options are: ")[1].split(", ")
    assert listed == sorted(set(trainer_parameters()) - {"callbacks", "logger", "default_root_dir"})
    assert {"max_epochs", "precision", "gradient_clip_val", "limit_train_batches"} <= set(listed)
    with pytest.raises(ValueError) as err:  # seqattn.run passes it: a value here would be lost
        train(_cfg(tmp_path, "+trainer.callbacks=[]"))
    assert err.match(r"^trainer\.callbacks is set by seqattn.run: configure it through the callbacks group")


class _Trainer:
    """A Trainer subclass passing its other arguments on: takes its own option and Lightning's."""

    def __init__(self, patience_log: bool = False, **kwargs) -> None:
        pass


def test_a_trainer_subclass_takes_its_own_options_and_lightnings():
    target = f"{__name__}._Trainer"
    check_trainer_options({"_target_": target, "patience_log": True, "max_epochs": 2, "plugins": [{"_target_": "x"}]})
    with pytest.raises(ValueError, match=r"trainer.patience_log='yes' \(str\): expected true or false"):
        check_trainer_options({"_target_": target, "patience_log": "yes"})
    with pytest.raises(ValueError, match=r"did you mean trainer.max_epochs\?"):
        check_trainer_options({"_target_": target, "max_epoch": 2})
    params = trainer_parameters()
    assert describe(params["accelerator"]) == "a string or an Accelerator (a config node with _target_)"
    assert describe(params["devices"]) == "a list of (an integer) or a string or an integer"
