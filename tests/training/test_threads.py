"""``cpu_threads``: which intra-op thread count a run gets, why, the log line and run_plan.json."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from seqattn.run import apply_threads
from seqattn.training.threads import (SMALL_MODEL_PARAMETERS, LoadProbe, choose_threads, parse_setting,
                                     parse_split_from)

SMALL, LARGE = SMALL_MODEL_PARAMETERS - 1, SMALL_MODEL_PARAMETERS


def _never() -> float:
    raise AssertionError("the load was measured although the choice does not need it")


@pytest.mark.parametrize("parameters, default, cpus, other, expected", [
    (137_300, 2, 2, 0.0, 1),    # the molecule network: 1 thread even alone
    (SMALL, 8, 8, 0.0, 1),      # small: 1 on any machine
    (229_900, 2, 2, 0.0, 2),    # text_cls alone: every core (66 s vs 87 s at 1 thread)
    (LARGE, 2, 2, 0.3, 2),      # a light neighbour (a browser): still both
    (LARGE, 2, 2, 0.6, 1),      # more than half a core taken: one thread
    (LARGE, 2, 2, 2.0, 1),      # beside a 2-thread matmul loop: one thread
    (LARGE, 2, 2, 7.5, 1),      # an overloaded machine: never fewer than 1
    (LARGE, 4, 8, 0.0, 4),      # at most torch's default (physical cores / OMP_NUM_THREADS)
    (LARGE, 8, 8, 3.0, 5),      # one per free core
    (LARGE, 2, 2, None, 2),     # load unknown (no /proc/stat): torch's default
])
def test_auto_counts_by_model_size_and_free_cores(parameters, default, cpus, other, expected):
    choice = choose_threads("auto", parameters, default, cpus, other)
    assert choice.threads == expected and choice.setting == "auto"
    assert choice.reason.startswith("cpu_threads=auto: ") and f"{parameters / 1e3:.1f}k parameters" in choice.reason
    if parameters < SMALL_MODEL_PARAMETERS:
        assert "too small to split" in choice.reason and choice.other_load is None
    else:
        assert ("not measured" if other is None else f"kept {other:.1f} of {cpus} CPUs busy") in choice.reason
        assert choice.other_load == other


def test_the_load_is_measured_only_when_the_choice_needs_it():
    assert choose_threads("auto", SMALL, 2, 2, _never).threads == 1
    assert choose_threads(3, LARGE, 2, 2, _never).threads == 3
    assert choose_threads(None, LARGE, 2, 2, _never).threads == 2
    assert choose_threads("auto", LARGE, 2, 2, lambda: 1.9).threads == 1


def test_a_given_count_wins_and_null_keeps_torchs_default():
    given = choose_threads(2, SMALL, 2, 2, 2.0)
    assert (given.threads, given.reason, given.setting) == (2, "cpu_threads=2 given", "2")
    assert choose_threads("4", SMALL, 2, 2, None).threads == 4  # from a command line
    kept = choose_threads(None, SMALL, 6, 8, None)
    assert (kept.threads, kept.reason, kept.setting) == (6, "cpu_threads=null: torch's default", "null")


@pytest.mark.parametrize("bad", [0, -1, "two", 1.5, True, "", "0"])
def test_a_bad_setting_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=r"cpu_threads must be auto, null or an integer >= 1, got " + repr(bad)[:3]):
        parse_setting(bad)
    with pytest.raises(ValueError):
        choose_threads(bad, LARGE, 2, 2, 0.0)


@pytest.mark.parametrize("parameters, split_from, other, expected", [
    (18_300, 0, 0.0, 2),             # social_pretrain's network (0 in its task config): both cores alone
    (18_300, 0, 2.0, 1),             # ... and one beside a 2-thread matmul loop: the load still decides
    (102_200, 100_000, 0.0, 2),      # at the threshold or above: split
    (99_999, 100_000, 0.0, 1),       # below it: one thread, the threshold named
    (LARGE, 300_000, 0.0, 1),        # a task may also raise it
    (SMALL, None, 0.0, 1),           # None: SMALL_MODEL_PARAMETERS
    (SMALL, "0", 0.0, 2),            # from a command line
])
def test_a_task_sets_from_which_size_auto_splits(parameters, split_from, other, expected):
    choice = choose_threads("auto", parameters, 2, 2, other, split_from=split_from)
    assert choice.threads == expected
    threshold = SMALL_MODEL_PARAMETERS if split_from is None else int(split_from)
    if parameters < threshold:
        assert f"< {threshold / 1e3:.0f}k (cpu_threads_split_from), ops too small to split" in choice.reason
    else:
        assert "too small" not in choice.reason and f"kept {other:.1f} of 2 CPUs busy" in choice.reason
        assert f">= {threshold / 1e3:.0f}k (cpu_threads_split_from)" in choice.reason
    assert choose_threads(1, parameters, 2, 2, _never, split_from=split_from).threads == 1  # a count given wins


@pytest.mark.parametrize("bad", [-1, 1.5, "many", True, "-5"])
def test_a_bad_split_from_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=r"cpu_threads_split_from must be an integer >= 0 \(a parameter count\), got "
                       + repr(bad)[:2]):
        parse_split_from(bad)
    with pytest.raises(ValueError, match="cpu_threads_split_from"):
        choose_threads("auto", LARGE, 2, 2, 0.0, split_from=bad)


def test_auto_on_a_resumed_run_keeps_the_recorded_count():
    recorded = {"threads": 2, "reason": "cpu_threads=auto: ...", "setting": "auto", "other_load": 0.1}
    for parameters in (SMALL, LARGE):  # whatever size and load would pick now
        kept = choose_threads("auto", parameters, 2, 2, _never, resumed=recorded)
        assert kept.to_dict() == recorded  # as recorded: a resumed run's plan equals its first part's
    assert choose_threads("auto", SMALL, 2, 2, _never, resumed={"threads": None}).threads == 1  # none recorded
    assert choose_threads(3, SMALL, 2, 2, _never, resumed=recorded).threads == 3  # a count given still wins


def test_the_probe_sees_a_busy_neighbour_but_not_itself():
    probe = LoadProbe()
    end = __import__("time").process_time() + 0.3
    while __import__("time").process_time() < end:  # this process's own work is not "other load"
        pass
    load = probe.other_load(min_seconds=0.3)
    if load is None:
        pytest.skip("no /proc/stat here")
    assert load >= 0.0


def test_apply_threads_sets_torch_and_logs_one_line(caplog):
    before = torch.get_num_threads()
    small, large = torch.nn.Linear(10, 10), torch.nn.Linear(1000, LARGE // 1000)
    try:
        with caplog.at_level(logging.INFO, logger="seqattn.run"):
            choice = apply_threads("auto", small)
        assert torch.get_num_threads() == 1 and choice.threads == 1
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cpu threads:")]
        assert lines == [f"cpu threads: 1 ({choice.reason})"] and "0.1k parameters" in lines[0]
        apply_threads(2, large)
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        assert apply_threads(None, large).threads == 1 and torch.get_num_threads() == 1  # null: left as it is
        split = apply_threads("auto", small, split_from=0)  # load unknown (no probe): torch's default count
        assert split.threads == torch.get_num_threads() >= 1 and "too small" not in split.reason
        json.dumps(choice.to_dict())  # recorded in run_plan.json
    finally:
        torch.set_num_threads(before)


def test_a_run_logs_its_thread_count_and_records_it_in_run_plan_json(tmp_path, caplog):
    from seqattn.run import train
    from seqattn.training.plan import read_plan
    from tests.workflows import QUIET, TASKS, compose

    before = torch.get_num_threads()
    run_dir = tmp_path / "run"
    try:
        with caplog.at_level(logging.INFO, logger="seqattn.run"):
            train(compose(TASKS["text_cls"].overrides + QUIET + ["trainer.max_epochs=1", "test=false",
                                                                  "cpu_threads_split_from=300000"], run_dir,
                          tmp_path / "data"))
    finally:
        torch.set_num_threads(before)
    threads = read_plan(run_dir).threads
    assert threads["setting"] == "auto" and threads["threads"] == 1  # the tests' tiny network
    assert "< 300k (cpu_threads_split_from)" in threads["reason"]  # the config's threshold reached the choice
    assert f"cpu threads: 1 ({threads['reason']})" in caplog.text
    assert json.loads((run_dir / "run_plan.json").read_text())["threads"] == threads


def test_a_bad_split_from_stops_a_run_before_its_data_is_read(tmp_path, monkeypatch):
    import seqattn.run
    from tests.workflows import QUIET, TASKS, compose

    def no_data(*args, **kwargs):
        raise AssertionError("the data module was built before the bad value was refused")

    monkeypatch.setattr(seqattn.run, "instantiate", no_data)
    with pytest.raises(ValueError, match="cpu_threads_split_from must be an integer >= 0"):
        seqattn.run.train(compose(TASKS["text_cls"].overrides + QUIET + ["cpu_threads_split_from=-3"],
                                  tmp_path / "run", tmp_path / "data"))
