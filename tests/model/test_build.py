"""build_part: a part config -> the object; a config with keys its class does not take says which and what to do."""

import pytest
from omegaconf import OmegaConf

from seqattn.model.build import build_part
from seqattn.model.stem import SpectrogramStem
from tests.workflows import QUIET, compose


def test_a_task_and_a_model_that_both_set_the_subsample_name_the_merged_keys_and_the_way_out(tmp_path):
    """task=speech_ctc's net.subsample (TimeSubsampling) and model=stem_transformer's (SpectrogramStem) merge key by
    key: the error names the keys the class does not take and the command-line deletions that keep one part."""

    def subsample(extra):
        cfg = compose(["task=speech_ctc", "model=stem_transformer", *extra] + QUIET, tmp_path / "run", tmp_path / "d")
        return OmegaConf.to_container(cfg.net.subsample, resolve=True)

    with pytest.raises(ValueError, match=r"net.subsample has keys TimeSubsampling does not take: \['channels', "
                                         r"'dilations', 'freq_out', 'kernel_size', 'time_factor', 'time_mode'\].*"
                                         r"to keep TimeSubsampling: ~net.subsample.channels "
                                         r"~net.subsample.dilations ~net.subsample.freq_out ~net.subsample.kernel_size "
                                         r"~net.subsample.time_factor ~net.subsample.time_mode$"):
        build_part(subsample([]), None, "subsample")
    # the deletions as printed keep the task's part
    plain = build_part(subsample(["~net.subsample.channels", "~net.subsample.dilations", "~net.subsample.freq_out",
                                  "~net.subsample.kernel_size", "~net.subsample.time_factor",
                                  "~net.subsample.time_mode"]), None, "subsample")
    assert type(plain).__name__ == "TimeSubsampling" and plain.factor == 3
    stem = build_part(subsample(["net.subsample._target_=seqattn.model.stem.SpectrogramStem", "~net.subsample.factor",
                                 "~net.subsample.mode"]), None, "subsample")
    assert isinstance(stem, SpectrogramStem) and stem.time.factor == 2


def test_the_merged_keys_hint_names_the_option_a_user_types_for_each_part():
    """``net.encoder`` is ``${model}`` in a run's config: the encoder's stray keys are deleted as ``~model.<key>``."""
    with pytest.raises(ValueError,
                       match=r"model has keys SpectrogramStem does not take: \['factor'\].*"
                             r"to keep SpectrogramStem: ~model.factor$"):
        build_part({"_target_": "seqattn.model.stem.SpectrogramStem", "dim": 8, "factor": 3}, None, "encoder")
