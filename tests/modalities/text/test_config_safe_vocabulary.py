"""Words that look like config syntax (``???``, ``${x}``, ``{``, ``}``, ``%``) are just words.

The vocabulary travels as data (the DataSpec in the checkpoint), never through OmegaConf: a
treebank with ``???`` in it trains, checkpoints, predicts and exports (UD English-EWT has it).
"""

import json

import torch

import seqattn
from seqattn.export import export
from seqattn.run import train
from seqattn.training.checkpoint import read_checkpoint
from tests.workflows import QUIET, compose

ODD = ["???", "${x}", "{", "}", "%", "${oc.env:HOME}"]


def _corpus(path, n=60):
    lines = []
    for i in range(n):
        odd = ODD[i % len(ODD)]
        tokens = ["the", odd, "was", "here"] if i % 2 else ["we", "saw", odd]
        tags = ["DET", "SYM", "AUX", "ADV"] if i % 2 else ["PRON", "VERB", "SYM"]
        lines.append(json.dumps({"tokens": tokens, "tags": tags}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_vocabulary_of_config_syntax_trains_checkpoints_predicts_and_exports(tmp_path):
    train_file = _corpus(tmp_path / "train.jsonl")
    cfg = compose(["task=text_tagging", f"data.train_path={train_file}", "data.batch_size=16", "model.dim=16",
                   "model.depth=1", "model.heads=2", "trainer.max_epochs=2", "data.lowercase=false"] + QUIET,
                  tmp_path / "run", tmp_path / "data")
    train(cfg)
    ckpt = tmp_path / "run" / "checkpoints" / "best.ckpt"
    checkpoint = read_checkpoint(ckpt)
    vocab = checkpoint["hyper_parameters"]["spec"]["vocab"]
    assert set(ODD) <= set(vocab)  # plain data in the checkpoint
    assert "???" not in (tmp_path / "run" / "config.yaml").read_text()  # never in a config

    predictor = seqattn.load(ckpt)
    assert set(ODD) <= set(predictor.model.net.adapter.vocab.words)
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"tokens": ["we", "saw", "???"]}) + "\n" + json.dumps({"tokens": ["${x}", "%"]}) + "\n")
    rows = predictor.predict(source)
    assert [r["tokens"] for r in rows] == [["we", "saw", "???"], ["${x}", "%"]]
    ids, _ = predictor.model.net.adapter.encode([["???", "${x}", "%", "never-seen"]])
    assert ids[0, :3].tolist() == [vocab.index("???"), vocab.index("${x}"), vocab.index("%")] and ids[0, 3] == 1

    path, inputs = export(ckpt, "torchscript", tmp_path / "model.ts", source)
    scripted = torch.jit.load(str(path))
    logits, _ = scripted(*inputs)
    with torch.no_grad():
        names = predictor.model.net.adapter.export_inputs  # ids, mask (and char_ids with character features)
        reference = predictor.model.net(dict(zip(names, inputs)))["logits"]
    torch.testing.assert_close(logits, reference)
