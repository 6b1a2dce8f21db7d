"""Part-of-speech tagging on a real treebank: UD English-LinES (train / dev / test as distributed),
the tagging recipe vs a word + character BiLSTM tagger.

Both run through the command a user types, on the same three files (the treebank's own split); the
reference is the recipe's BiLSTM encoder (``model=bilstm``) with the same word and character
features: what a plain, strong tagger of this size scores on these files (UD shared-task taggers of
this kind: UPOS in the mid 90s).
"""

from __future__ import annotations

from seqattn.bench.real import Context, Result, command_line, compare_seeds, recipe_reference

SEEDS = 3


def _files(ctx: Context) -> list[str]:
    folder = ctx.data / "ud-english-lines"
    paths = {name: folder / f"{name}.conllu" for name in ("train", "dev", "test")}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no UD English-LinES files: {missing}")
    return [f"data.train_path={paths['train']}", f"data.val_path={paths['dev']}", f"data.test_path={paths['test']}"]


def case_lines(ctx: Context) -> Result:
    overrides = ["task=text_tagging", *_files(ctx)]
    # the BiLSTM as it was measured: the labeling objective's lr 2e-3 (the recipe's 4e-3 was chosen on dev for the
    # self-attention encoder, conf/task/text_tagging.yaml; the BiLSTM's lr was not tuned)
    reference = overrides + ["model=bilstm", "objective.optimizer.lr=2.0e-3"]
    short = ctx.choose([], ["trainer.max_epochs=2"])  # --quick: both sides
    overrides, reference = overrides + short, reference + short
    seqattn, seq_s, ref, ref_s = compare_seeds(ctx, "lines", overrides, ctx.choose(SEEDS, 1),
                                               recipe_reference(ctx, reference, "bilstm"), "BiLSTM")
    return Result("UD English-LinES (train 3,457 / dev 1,118 / test 1,121 sentences)", "test UPOS accuracy", False,
                  seqattn, ref, "word + character BiLSTM (model=bilstm, same features)", seq_s, ref_s,
                  command_line(overrides), notes=ctx.choose("", "QUICK: 1 seed, 2 epochs; ")
                  + f"reference: {command_line(reference)}")
