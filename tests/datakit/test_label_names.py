"""The one label naming every reader uses, and the case-collision finder (seqattn.labels)."""

import pytest

from seqattn.labels import LabelNames, case_collisions, label_name


@pytest.mark.parametrize("cell, name", [
    (0, "0"), (0.0, "0"), (1, "1"), (1.0, "1"), ("1.0", "1"), (" 2.00 ", "2"), ("-3.0", "-3"), (-0.0, "0"),
    (1.5, "1.5"), ("1.5", "1.5"), ("01", "01"), ("1e3", "1e3"), (True, "True"), (" neg ", "neg"), ("Neg", "Neg"),
])
def test_label_name(cell, name):
    assert label_name(cell) == name


def test_label_names_counts_only_the_cells_it_renamed():
    names = LabelNames()
    assert [names(c) for c in [1, 1.0, "1.0", " pos", 0.0, "x"]] == ["1", "1", "1", "pos", "0", "x"]
    assert dict(names.changed) == {("1.0", "1"): 2, ("0.0", "0"): 1}
    assert names.report().startswith("3 label(s) written as integral numbers are named by the integer")
    assert LabelNames().report() is None


def test_case_collisions_groups_labels_that_differ_only_in_case():
    assert case_collisions({"Neg": 1, "neg": 5, "pos": 4}) == [{"Neg": 1, "neg": 5}]
    assert case_collisions({"Up": 1, "down": 2, "up": 3, "UP": 1}) == [{"UP": 1, "Up": 1, "up": 3}]
    assert case_collisions({"a": 1, "b": 2}) == []


def test_a_given_label_set_is_named_like_the_data():
    from seqattn.datakit.module import TaskDataModule

    assert TaskDataModule(labels=[0.0, 1, " 2 "]).label_names == ["0", "1", "2"]
    with pytest.raises(ValueError, match=r"labels lists \['1'\] more than once"):
        TaskDataModule(labels=[1, 1.0])
