"""FSDD, recorded human speech: the clip-classification recipe vs a log-mel CNN, on two splits.

The Free Spoken Digit Dataset (``<data>/fsdd``: 3,000 clips of the digits 0-9, 6 speakers x 50 takes,
8 kHz mono, trimmed) comes with two manifests (``path,label,speaker,split``):

- ``manifest_official.csv``: the dataset's own split by take (takes 0-4 test, 5-9 val, 10-49 train;
  every speaker in every split);
- ``manifest_speakers.csv``: speakers ``jackson`` and ``theo`` held out as test (unseen in training),
  takes 45-49 of the other four as val.

Both sides run through the command a user types, with the custom-data options of
``tasks/speech_cls/README.md``::

    python -m seqattn.run task=speech_cls data.manifest=<data>/fsdd/manifest_official.csv seed=<s>

The reference is the same recipe with the log-mel CNN encoder (``model=logmel_cnn head.pooling=mean``:
2-D convolutions over the ``[frames x mel bins]`` map, the classic keyword-spotting model) on the same
split, features, augmentation and training length. Both sides run with ``cpu_threads=1`` (one intra-op
thread: these small models gain little from a second thread and lose much when the machine is shared;
see the performance issue). The case gives one table row per manifest.

``fsdd_ctc``: the same recordings as **speech recognition with CTC** (``task=speech_ctc``): each clip's
digit spelled out as its transcript (``7`` -> ``seven``, characters as tokens), so the model must emit the
letters of the word it hears, in order, and decide how many. The case writes the manifests a user would
write (``path,transcript,speaker,split``, absolute paths to the recordings) under its work folder and runs
the recipe through its custom-data path (``tasks/speech_ctc/README.md``) against the same recipe with a
two-layer BiLSTM encoder (``model=bilstm``: the classic CTC acoustic model) on the same split, features,
augmentation and training length. The metric is the word accuracy (``test/seq_acc``: the decoded letters
spell the right word); the notes give the character error rate (``test/ter``) of both sides.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from seqattn.bench.real import (Context, Result, breakdown, command_line, compare_seeds, mean_sd,
                                recipe_reference)

SEEDS = 3
#: ``--quick`` (development): 1 seed and this many epochs on both sides
QUICK_EPOCHS = 2
#: manifest file -> the row's dataset label
SPLITS = {
    "manifest_official.csv": "FSDD recorded digits, official split (2,400 / 300 / 300 clips, every speaker in test)",
    "manifest_speakers.csv": "FSDD recorded digits, speakers jackson and theo held out (1,800 / 200 / 1,000 clips)",
}
#: the recipe's extra overrides per side: seqattn's default, and the log-mel CNN on the same recipe
RUNS = {"attention": [], "logmel_cnn": ["model=logmel_cnn", "head.pooling=mean"]}
#: overrides of both sides
COMMON = ["cpu_threads=1"]
REFERENCE_NAME = "log-mel CNN (model=logmel_cnn, same features, augmentation and training length)"


def run_overrides(manifest: Path, name: str) -> list[str]:
    """``python -m seqattn.run`` arguments of one side (``name`` in :data:`RUNS`) on ``manifest``."""
    return ["task=speech_cls", f"data.manifest={manifest}", *RUNS[name], *COMMON]


@dataclass
class SplitResults(Result):
    """The official split's :class:`Result` whose table row is followed by the other manifests' rows
    (``more``: their fields as plain dicts, so ``--json`` can write them)."""

    more: list[dict] = field(default_factory=list)

    def row(self) -> str:
        return "\n".join([Result.row(self), *(Result(**r).row() for r in self.more)])


def split_case(ctx: Context, manifest: Path, dataset: str) -> Result:
    """One manifest: per seed the recipe and the log-mel CNN, each through the user's command."""
    short = ctx.choose([], [f"trainer.max_epochs={QUICK_EPOCHS}"])  # --quick: both sides
    ours, cnn = run_overrides(manifest, "attention") + short, run_overrides(manifest, "logmel_cnn") + short
    sub = ctx.sub(ctx.work / manifest.stem)
    seqattn, seq_s, ref, ref_s = compare_seeds(sub, f"fsdd {manifest.stem}", ours, ctx.choose(SEEDS, 1),
                                               recipe_reference(sub, cnn, "logmel_cnn"), "log-mel CNN")
    notes = [ctx.choose("", f"QUICK: 1 seed, {QUICK_EPOCHS} epochs"), f"reference: {command_line(cnn)}",
             breakdown(sub.runs)]
    return Result(dataset, "test accuracy", False, seqattn, ref, REFERENCE_NAME, seq_s, ref_s,
                  command_line(ours), notes="; ".join(filter(None, notes)))


def each_manifest(ctx: Context, splits: dict[str, str], one: Callable[[Context, Path, str], Result],
                  more_note: Callable[[Result], str]) -> SplitResults:
    """``one(ctx, manifest, row label)`` for each manifest of ``splits`` in ``<data>/fsdd``, as one result whose
    notes add ``more_note`` of each row after the first; a missing folder or manifest raises
    ``FileNotFoundError`` (the suite then skips the case, saying why)."""
    folder = ctx.data / "fsdd"
    manifests = [folder / name for name in splits]
    missing = [str(m) for m in manifests if not m.is_file()]
    if missing:
        raise FileNotFoundError(f"no {', '.join(missing)}")
    first, *rest = [one(ctx, m, splits[m.name]) for m in manifests]
    notes = "; ".join([first.notes] + [more_note(r) for r in rest])
    return SplitResults(**{**asdict(first), "notes": notes}, more=[asdict(r) for r in rest])


def case_fsdd(ctx: Context) -> Result:
    """Both manifests of ``<data>/fsdd`` (:func:`each_manifest`)."""
    return each_manifest(ctx, SPLITS, split_case, lambda r: f"{r.dataset.split(',')[1].strip()}: `{r.command}`")


#: FSDD's labels spelled out: the transcripts of ``fsdd_ctc``
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: ``fsdd_ctc``'s rows: the manifests of :data:`SPLITS` as CTC data (recognition, not classification)
CTC_SPLITS = {
    "manifest_official.csv": "FSDD recorded digits as speech recognition (CTC over the spelled word), official split",
    "manifest_speakers.csv": "FSDD recorded digits as speech recognition (CTC over the spelled word), speakers jackson "
                             "and theo held out",
}
#: both sides of ``fsdd_ctc``: the recipe's custom-data options for recorded words (tasks/speech_ctc/README.md)
CTC_COMMON = ["task=speech_ctc", "data.tokens=characters", "cpu_threads=1"]
#: the reference's encoder on the same recipe
CTC_REFERENCE = ["model=bilstm"]
CTC_REFERENCE_NAME = "BiLSTM CTC (model=bilstm, 2 layers; same features, augmentation and training length)"


def spelled_manifest(folder: Path, name: str, work: Path) -> Path:
    """``work/<stem>_spelled.csv``: FSDD's manifest ``name`` as a speech-recognition manifest, each clip's
    digit spelled out as its transcript (``path,transcript,speaker,split``; absolute paths to ``folder``'s
    recordings, which are not copied). A label that is not a digit 0-9 raises ``ValueError`` naming its line."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"{Path(name).stem}_spelled.csv"
    with open(folder / name, newline="") as f, open(out, "w", newline="") as g:
        w = csv.writer(g)
        w.writerow(["path", "transcript", "speaker", "split"])
        for line, row in enumerate(csv.DictReader(f), start=2):
            label = (row.get("label") or "").strip()
            if label not in [str(d) for d in range(10)]:
                raise ValueError(f"{folder / name}:{line}: label {label!r} is not a digit 0-9")
            w.writerow([str((folder / row["path"]).resolve()), WORDS[int(label)], row["speaker"], row["split"]])
    return out


def ctc_split_case(ctx: Context, manifest: Path, dataset: str) -> Result:
    """One manifest as CTC data: per seed the recipe and the BiLSTM, each through the user's command."""
    spelled = spelled_manifest(manifest.parent, manifest.name, ctx.work)
    short = ctx.choose([], [f"trainer.max_epochs={QUICK_EPOCHS}"])  # --quick: both sides
    ours = [CTC_COMMON[0], f"data.manifest={spelled}", *CTC_COMMON[1:], *short]
    ref = [*ours, *CTC_REFERENCE]
    sub = ctx.sub(ctx.work / manifest.stem)
    ref_runs: list[dict] = []  # the BiLSTM runs' metrics.json, for their character error rate
    seqattn, seq_s, bilstm, ref_s = compare_seeds(
        sub, f"fsdd_ctc {manifest.stem}", ours, ctx.choose(SEEDS, 1),
        recipe_reference(sub, ref, "bilstm", "test/seq_acc", runs=ref_runs), "BiLSTM", key="test/seq_acc")
    ours_ter, ref_ter = [m["test/ter"] for m, _ in sub.runs], [m["test/ter"] for m in ref_runs]
    notes = [ctx.choose("", f"QUICK: 1 seed, {QUICK_EPOCHS} epochs"),
             f"character error rate (test/ter): seqattn {mean_sd(ours_ter)}, BiLSTM {mean_sd(ref_ter)}",
             f"reference: {command_line(ref)}", breakdown(sub.runs)]
    return Result(dataset, "test word accuracy (seq_acc)", False, seqattn, bilstm, CTC_REFERENCE_NAME, seq_s, ref_s,
                  command_line(ours), notes="; ".join(filter(None, notes)))


def case_fsdd_ctc(ctx: Context) -> Result:
    """Both manifests of ``<data>/fsdd`` as speech recognition (CTC; :func:`each_manifest`)."""
    return each_manifest(ctx, CTC_SPLITS, ctc_split_case, lambda r: f"speakers held out: `{r.command}` ({r.notes})")
