"""``compile=``: the encoder is compiled in place, the run trains what an eager run trains, and its
checkpoint is an eager checkpoint (same parameter names, loads without compiling)."""

import json
from pathlib import Path

import pytest
import torch

from seqattn.run import train
from seqattn.training.checkpoint import build_model
from seqattn.training.compile import BACKENDS, compile_encoder, parse_compile

TINY = ["task=text_cls", "data.synth.n_train=96", "data.synth.n_val=32", "data.synth.n_test=32",
        "data.batch_size=32", "model.dim=16", "model.depth=1", "model.heads=2", "trainer.max_epochs=2",
        "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "callbacks.early_stopping=null",
        "plot=false", "cpu_threads=1"]


@pytest.mark.parametrize("value, backend", [(None, None), (False, None), ("off", None), ("null", None),
                                            (True, "inductor"), ("true", "inductor"), ("inductor", "inductor"),
                                            ("aot_eager", "aot_eager"), ("Eager", "eager")])
def test_settings_name_a_backend_or_off(value, backend):
    assert parse_compile(value) == backend


@pytest.mark.parametrize("value", ["inductr", 1, "cudagraphs"])
def test_an_unknown_setting_is_an_error_naming_it_and_the_choices(value):
    with pytest.raises(ValueError, match=rf"compile={value!r}.*{BACKENDS[0]}"):
        parse_compile(value)


def test_off_leaves_the_network_untouched():
    net = torch.nn.Module()
    net.encoder = torch.nn.Linear(2, 2)
    assert compile_encoder(net, None) is None
    assert net.encoder._compiled_call_impl is None


def test_a_network_without_an_encoder_is_an_error():
    with pytest.raises(ValueError, match="no encoder"):
        compile_encoder(torch.nn.Linear(2, 2), "aot_eager")


def test_a_bad_setting_stops_the_run_before_the_data_is_read(compose_cfg, tmp_path):
    with pytest.raises(ValueError, match="compile='fast'"):
        train(compose_cfg([*TINY, "compile=fast"]))
    assert not (tmp_path / "data").exists()


def _best_state(metrics):
    return torch.load(metrics["best_checkpoint"], map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.slow  # ~20 s alone, ~60 s on a loaded machine (two tiny runs and a trace)
def test_a_compiled_run_trains_what_an_eager_run_trains_and_saves_an_eager_checkpoint(compose_cfg, tmp_path):
    """``aot_eager`` traces forward and backward as inductor does, without code generation (fast)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    eager = train(compose_cfg(TINY, data_dir=tmp_path / "data", run="eager"))
    torch.manual_seed(0)
    compiled = train(compose_cfg([*TINY, "compile=aot_eager"], data_dir=tmp_path / "data", run="compiled"))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # the encoder really went through dynamo
    assert compiled["compile"] == "aot_eager" and "compile" not in eager
    assert json.loads(Path(compiled["output_dir"], "metrics.json").read_text())["compile"] == "aot_eager"
    want, got = _best_state(eager), _best_state(compiled)
    assert list(got) == list(want)  # no "_orig_mod." in the names: an eager checkpoint
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-4, rtol=1e-4, msg=name)
    assert compiled["test/acc"] == pytest.approx(eager["test/acc"], abs=1e-6)
    model = build_model(compiled["best_checkpoint"])  # loads into an eager network
    assert model.net.encoder._compiled_call_impl is None
