"""Node CSV labels go through the one label naming of every reader (issue 21)."""

import logging

from seqattn.modalities.graph.social_files import read_node_csv


def test_node_labels_written_as_integral_numbers_are_one_class(tmp_path, caplog):
    path = tmp_path / "nodes.csv"
    path.write_text("id,f,label\na,0.1,1\nb,0.2,1.0\nc,0.3,0\nd,0.4,\ne,0.5,2.5\n")
    with caplog.at_level(logging.INFO, logger="seqattn.modalities.graph"):
        table = read_node_csv(path)
    assert table.labels == ["1", "1", "0", None, "2.5"]
    assert "1 label(s) written as integral numbers are named by the integer" in caplog.text
