"""Few labels with and without masked-token pretraining (issue 22): UD English-LinES tagging (``lines_pretrain``,
below; ``lines_pretrain_full``: the same with all tagged training sentences), FSDD spoken digits
(``fsdd_pretrain`` / ``fsdd_pretrain_full``, :func:`_fsdd_pretrain`), FreeSolv (``freesolv_pretrain`` /
``freesolv_pretrain_full``, :func:`_freesolv_pretrain`) and Cora (``cora_pretrain``: the Planetoid split's 140
labelled papers; ``cora_pretrain_full``: all 1,208 outside validation and test; :func:`_cora_pretrain`).

LinES:

1. ``task=text_pretrain`` on the words of ALL training sentences (``train.conllu``, tags not read; dev's
   words choose the checkpoint by ``val/loss``), through the custom-data path of its README;
2. per seed, ``task=text_tagging`` on ``data.train_fraction`` (10 %) of the tagged training sentences
   (the same seeded sample in both arms), validated on dev, tested on test:
   ``init_from=<pretrain run>/checkpoints/best.ckpt finetune.vocabulary=data`` (seqattn column;
   ``FINETUNE_VOCABULARY``: ``checkpoint``, the pretraining's vocabulary, was worse on dev) vs the same
   recipe from scratch (reference column). The ratio is pretrained / scratch.

The fine-tunes' length is chosen on dev, the same way in both arms: up to ``FINETUNE_EPOCHS`` epochs,
early stopping on dev accuracy (patience ``FINETUNE_PATIENCE``) and the best dev epoch's checkpoint is
tested (the recipe's 15 epochs left both arms still improving on 346 sentences). The notes give each
run's best dev accuracy and epochs.

One pretraining run (seed 0, in ``<work>/../lines_pretraining``) serves every seed's fine-tune of both cases; its wall
time is in the notes. ``lines_pretrain_full`` fine-tunes on all 3,457 tagged training sentences, the rest as above.
"""

from __future__ import annotations

import csv
import hashlib
import json
import time
from pathlib import Path

from seqattn.bench.real import Context, Result, command_line, compare_seeds, recipe_reference, run_recipe
from seqattn.bench.real.lines import _files

SEEDS = 3
FRACTION = 0.1
PRETRAIN_EPOCHS = 5
FINETUNE_EPOCHS = 100  # at most; early stopping on dev accuracy ends a run earlier
FINETUNE_PATIENCE = 15
#: the pretrained arm's finetune.vocabulary: ``checkpoint`` (every pretraining word keeps its row) lost to
#: ``data`` (the labelled sentences' words; the others are <unk>) on dev, seed 0: best dev 0.849 vs 0.870
#: (tasks/text_pretrain/README.md)
FINETUNE_VOCABULARY = "data"
#: the 17 universal POS tags: a 10 % sample may lack a rare tag (SYM) that dev has, so the set is given
UPOS = "[ADJ,ADP,ADV,AUX,CCONJ,DET,INTJ,NOUN,NUM,PART,PRON,PROPN,PUNCT,SCONJ,SYM,VERB,X]"


def case_lines_pretrain(ctx: Context) -> Result:
    """UD English-LinES tagging with 10 % of the tagged training sentences, with and without masked-word pretraining."""
    return _lines_pretrain(ctx, FRACTION)


def case_lines_pretrain_full(ctx: Context) -> Result:
    """UD English-LinES tagging with all tagged training sentences, with and without masked-word pretraining."""
    return _lines_pretrain(ctx, 1.0)


def _lines_pretrain(ctx: Context, fraction: float) -> Result:
    """One pretraining (seed 0) shared by ``lines_pretrain`` and ``lines_pretrain_full`` (the folder
    ``<work>/../lines_pretraining``), then per seed the tagger on ``fraction`` of the tagged training sentences
    (all of them at 1.0), pretrained vs scratch, the length chosen on dev the same way in both arms."""
    files = _files(ctx)  # FileNotFoundError (the case is skipped) when the treebank is absent
    label = "lines_pretrain" + ("" if fraction < 1.0 else "_full")
    epochs = ctx.choose(PRETRAIN_EPOCHS, 1)
    pretrain = ["task=text_pretrain", *files, f"trainer.max_epochs={epochs}", "cpu_threads=1", "seed=0"]
    metrics, pretrain_s, ckpt = _pretrain_once(ctx, pretrain, label, "lines_pretrain")
    ctx.log(f"{label}: pretrained {epochs} epochs in {pretrain_s:.0f} s: test/loss {metrics['test/loss']:.3f}, "
            f"test/acc {metrics['test/acc']:.3f}")
    scratch = ["task=text_tagging", *files, *([f"data.train_fraction={fraction}"] if fraction < 1.0 else []),
               f"data.labels={UPOS}", "cpu_threads=1", *_finetune_length(ctx)]
    pretrained = scratch + [f"init_from={ckpt}", f"finetune.vocabulary={FINETUNE_VOCABULARY}"]
    share = (f"{fraction:.0%} of the tagged training sentences" if fraction < 1.0
             else "all 3,457 tagged training sentences")
    return _pretrained_vs_scratch(
        ctx, label, pretrained, scratch, f"UD English-LinES, {share} (pretrained on the words of all 3,457)",
        "test UPOS accuracy", f"pretraining ({pretrain_s:.0f} s wall, {epochs} epochs, test masked-word acc "
        f"{metrics['test/acc']:.3f}): {command_line(pretrain)}", "dev")


def _finetune_length(ctx: Context) -> list[str]:
    """Both arms' fine-tune length: up to FINETUNE_EPOCHS, early stopping on validation (QUICK: 2 epochs)."""
    return ctx.choose([f"trainer.max_epochs={FINETUNE_EPOCHS}",
                       f"callbacks.early_stopping.patience={FINETUNE_PATIENCE}"], ["trainer.max_epochs=2"])


def _pretrained_vs_scratch(ctx: Context, case: str, pretrained: list[str], scratch: list[str], title: str,
                           metric: str, pretraining: str, val_name: str, key: str = "test/acc",
                           val_key: str = "best_val/acc", lower_is_better: bool = False,
                           quick_note: str = "QUICK: 1 seed, pretraining 1 epoch, fine-tunes 2 epochs; ") -> Result:
    """Per seed, the fine-tune ``pretrained`` (seqattn column) beside ``scratch`` (reference column), each
    scored by ``key`` of its metrics.json; the notes give ``pretraining`` (its wall, epochs, score and command),
    the scratch command and each run's best validation score (``val_key``) and epochs (``val_name``: what the
    validation split is called)."""
    ours, ours_s, ref, ref_s = compare_seeds(ctx, case, pretrained, ctx.choose(SEEDS, 1),
                                             recipe_reference(ctx, scratch, "scratch", key), "scratch", key=key)
    best = {arm: _dev_summary(ctx, arm, len(ours), val_key) for arm in ("seqattn", "scratch")}
    what = val_key.removeprefix("best_").replace("val/", f"{val_name} ")
    return Result(title, metric, lower_is_better, ours, ref, "the same recipe from scratch", ours_s, ref_s,
                  command_line(pretrained),
                  notes=ctx.choose("", quick_note)
                  + f"{pretraining}; scratch: {command_line(scratch)}; best {what} / epochs run per seed: "
                  f"pretrained {best['seqattn']}, scratch {best['scratch']}")


def config_digest(overrides: list[str]) -> str:
    """SHA-1 of the config ``python -m seqattn.run <overrides>`` composes (unresolved YAML): it changes when a
    recipe default the command does not name changes (an adapter's positional encoding, a width)."""
    from omegaconf import OmegaConf

    from seqattn.configs import compose_config

    return hashlib.sha1(OmegaConf.to_yaml(compose_config(overrides)).encode()).hexdigest()


def _pretrain_once(ctx: Context, pretrain: list[str], label: str, case: str) -> tuple[dict, float, Path]:
    """Run the pretraining ``pretrain`` (+ ``ctx.extra``) into ``<folder>/pretrain``, or reuse a finished one made by
    the same command **and the same composed config** there (a rerun after a fine-tune failure, or the other case
    of the pair; a pretraining made before a recipe default changed is run again, and the log says why).
    ``folder`` is :func:`_pretraining_folder` of ``case``: one pretraining serves a case and its ``_full`` twin.
    Returns ``(its metrics.json, wall seconds, its best checkpoint)``."""
    out = _pretraining_folder(ctx, case) / "pretrain"
    ckpt = out / "checkpoints" / "best.ckpt"
    done = out / "bench_command.json"
    command, digest = pretrain + ctx.extra, config_digest(pretrain + ctx.extra)
    if done.is_file():
        made = json.loads(done.read_text())
        if made["command"] == command and made.get("config_sha1") == digest:
            ctx.log(f"{label}: reusing the finished pretraining in {out}")
            return json.loads((out / "metrics.json").read_text()), made["seconds"], ckpt
        ctx.log(f"{label}: the pretraining in {out} was made by "
                + ("another command" if made["command"] != command else "the same command with other recipe defaults")
                + ": running it again")
    start = time.perf_counter()
    metrics, _ = run_recipe(command, out)
    seconds = time.perf_counter() - start
    done.write_text(json.dumps({"command": command, "config_sha1": digest, "seconds": seconds}))
    return metrics, seconds, ckpt


def _pretraining_folder(ctx: Context, case: str) -> Path:
    """``<work>/../<case>ing`` (``lines_pretrain`` -> ``lines_pretraining``): shared by the case and its ``_full`` twin."""
    return ctx.work.parent / f"{case}ing"


def _dev_summary(ctx: Context, arm: str, seeds: int, val_key: str = "best_val/acc") -> str:
    """``0.868 (62 ep), ...``: each seed's best validation score (``val_key``) and epochs run, from its metrics.json."""
    rows = []
    for seed in range(seeds):
        metrics = json.loads((ctx.work / f"{arm}_{seed}" / "metrics.json").read_text())
        rows.append(f"{metrics[val_key]:.4f} ({metrics['epochs']} ep)")
    return ", ".join(rows)


#: FSDD: masked-frame pretraining epochs (the recipe's default) and the fine-tunes' cap and patience
FSDD_PRETRAIN_EPOCHS = 20
FSDD_MANIFEST = "manifest_speakers.csv"


def case_fsdd_pretrain(ctx: Context) -> Result:
    """FSDD spoken digits with 10 % of the labelled training clips, with and without masked-frame pretraining."""
    return _fsdd_pretrain(ctx, FRACTION)


def case_fsdd_pretrain_full(ctx: Context) -> Result:
    """FSDD spoken digits with all labelled training clips, with and without masked-frame pretraining."""
    return _fsdd_pretrain(ctx, 1.0)


def _fsdd_pretrain(ctx: Context, fraction: float) -> Result:
    """Spoken digits with and without masked-frame pretraining on FSDD (issue 22).

    1. ``task=speech_pretrain`` on ALL training clips of ``manifest_speakers.csv`` (1,800 clips of four
       speakers, digit labels not read; the val takes choose the checkpoint by ``val/loss``), with the
       mel band of ``task=speech_cls`` (``adapter.f_max=4000``: the fine-tune computes the same features);
       one run (seed 0) shared by ``fsdd_pretrain`` and ``fsdd_pretrain_full`` (the folder
       ``<work>/../fsdd_pretraining``);
    2. per seed, ``task=speech_cls`` on ``data.train_fraction=fraction`` (10 %, label-stratified; all of them
       at 1.0) of the labelled training clips, validated on the val takes, tested on the two held-out speakers
       (jackson, theo): ``init_from=<pretrain run>/checkpoints/best.ckpt`` vs the same recipe from scratch.

    The fine-tunes' length is the same in both arms and tested at the best val epoch. With 10 % (180 clips)
    it is chosen on val (up to ``FINETUNE_EPOCHS``, early stopping patience ``FINETUNE_PATIENCE``): the runs
    stopped after 33-85 epochs. With all 1,800 clips (``fsdd_pretrain_full``) each epoch sees ten times the
    clips, so that cap would cost hours per run on the shared machine; the full case keeps the speech_cls
    recipe's own length instead (its default ``trainer.max_epochs``, 20, chosen on FSDD's official val takes
    with all their labels, and its default early stopping; the best val epoch's checkpoint tested).
    """
    manifest = ctx.data / "fsdd" / FSDD_MANIFEST
    if not manifest.is_file():
        raise FileNotFoundError(f"no {manifest}")
    label = "fsdd_pretrain" + ("" if fraction < 1.0 else "_full")
    epochs = ctx.choose(FSDD_PRETRAIN_EPOCHS, 1)
    pretrain = ["task=speech_pretrain", f"data.manifest={manifest}", "adapter.f_max=4000",
                f"trainer.max_epochs={epochs}", "cpu_threads=1", "seed=0"]
    metrics, pretrain_s, ckpt = _pretrain_once(ctx, pretrain, label, "fsdd_pretrain")
    ctx.log(f"{label}: pretrained {epochs} epochs in {pretrain_s:.0f} s: test/loss {metrics['test/loss']:.3f}")
    # model=transformer: the pretrained network has no conv stem (masked-frame pretraining needs one output per
    # adapter frame), so both sides fine-tune the encoder it pretrained, not speech_cls's default stem_transformer
    length = (_finetune_length(ctx) if fraction < 1.0
              else ctx.choose([], ["trainer.max_epochs=2"]))  # all labels: the recipe's own 20 epochs (docstring)
    # adapter.n_mels=40: speech_pretrain's log-mel width, which the pretrained adapter reads (speech_cls's own default
    # is 64 since 2026-12-05; this case's measurements were made at 40 on both sides)
    scratch = ["task=speech_cls", f"data.manifest={manifest}",
               *([f"data.train_fraction={fraction}"] if fraction < 1.0 else []), "model=transformer",
               "adapter.n_mels=40", "cpu_threads=1", "plot=false", *length]
    pretrained = scratch + [f"init_from={ckpt}"]
    share = f"{fraction:.0%} of the labelled training clips" if fraction < 1.0 else "all 1,800 labelled training clips"
    return _pretrained_vs_scratch(
        ctx, label, pretrained, scratch,
        f"FSDD recorded digits, {share}, speakers jackson and theo held out "
        "(pretrained on all 1,800 training clips)", "test accuracy",
        f"pretraining ({pretrain_s:.0f} s wall, {epochs} epochs, test masked-frame loss {metrics['test/loss']:.3f}): "
        f"{command_line(pretrain)}", "val")


#: FreeSolv: the seeds of the evaluated splits (the labelled ``freesolv`` case's random 80/10/10 split by seed),
#: the masked-atom pretraining's epochs, and the few-label share
FREESOLV_SEEDS = 3
FREESOLV_PRETRAIN_EPOCHS = 10
#: the unlabelled molecules: every SMILES of these files under ``<data>/molecules`` (targets unused) ...
FREESOLV_PRETRAIN_FILES = ("freesolv.csv", "lipophilicity.csv")
#: ... and the NCI molecules RDKit ships (under ``rdkit.RDConfig.RDDataDir``)
NCI_SMI = ("NCI", "first_5K.smi")
#: the pretrained arm's ``finetune.pretrained_lr_mult`` per labelled share, chosen on validation (best val loss,
#: mean of seeds 0-2, 10 %: 3 -> 0.180, 1 -> 0.195, 0.3 -> 0.491; scratch 0.210; tasks/molecule_pretrain/README.md)
FREESOLV_PRETRAINED_LR_MULT = {FRACTION: 3.0, 1.0: 1.0}


def nci_smiles_path() -> Path:
    """The NCI SMILES file RDKit ships (``<RDDataDir>/NCI/first_5K.smi``: one SMILES and an id per line)."""
    from rdkit import RDConfig

    return Path(RDConfig.RDDataDir).joinpath(*NCI_SMI)


def canonical(smiles: str) -> str | None:
    """RDKit's canonical SMILES of ``smiles``, or None when RDKit rejects it or it has no atoms (what the molecule
    data's parser rejects; the bench names no modality, so it asks RDKit itself)."""
    from rdkit import Chem, RDLogger

    if not smiles or not smiles.strip():
        return None
    RDLogger.DisableLog("rdApp.*")
    try:
        mol = Chem.MolFromSmiles(smiles.strip())
    finally:
        RDLogger.EnableLog("rdApp.*")
    return None if mol is None or mol.GetNumAtoms() == 0 else Chem.MolToSmiles(mol)


def _read_smiles(source: Path) -> list[str]:
    """The SMILES of a ``.smi`` / ``.txt`` file (the first field of each line) or of a CSV's ``smiles`` column;
    empty lines and lines starting with ``#`` are skipped. A CSV without the column is a ``ValueError``."""
    lines = [line for line in source.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    if source.suffix.lower() in (".smi", ".txt"):
        return [line.split()[0] for line in lines]
    rows = list(csv.DictReader(lines))
    if rows and "smiles" not in rows[0]:
        raise ValueError(f"{source}: no 'smiles' column in its header {list(rows[0])}")
    return [row["smiles"] or "" for row in rows]


def write_pretrain_smiles(folder: Path, sources: list[Path], exclude: set[str]) -> tuple[Path, dict[str, dict[str, int]]]:
    """Every SMILES of ``sources`` (CSVs with a ``smiles`` column, or ``.smi`` files: one SMILES per line) whose
    canonical form is not in ``exclude`` (canonical SMILES: the evaluated test molecules), once each, into
    ``folder/pretrain_<hash>.smi`` (one canonical SMILES per line; the name changes with the content, so a
    finished pretraining is reused only for the same molecules). Returns the file and, per source file name,
    the counts ``read``, ``invalid`` (the parser rejects it: left out), ``excluded``, ``duplicate`` (already
    written from this or an earlier source) and ``written``."""
    kept: list[str] = []
    seen: set[str] = set()
    counts: dict[str, dict[str, int]] = {}
    for source in sources:
        records = _read_smiles(source)
        count = counts[source.name] = {"read": len(records), "invalid": 0, "excluded": 0, "duplicate": 0, "written": 0}
        for record in records:
            smiles = canonical(record)
            reason = ("invalid" if smiles is None else "excluded" if smiles in exclude
                      else "duplicate" if smiles in seen else "written")
            count[reason] += 1
            if reason == "written":
                seen.add(smiles)
                kept.append(smiles)
    text = "".join(f"{smiles}\n" for smiles in kept)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"pretrain_{hashlib.sha1(text.encode()).hexdigest()[:10]}.smi"
    path.write_text(text)
    return path, counts


def evaluated_test_smiles(overrides: list[str], seeds: int) -> set[str]:
    """The canonical SMILES of the test molecules of ``python -m seqattn.run <overrides> seed=<s>`` for every
    seed below ``seeds``: the run's own DataModule (``overrides`` composed as the run composes them, its ``data``
    instantiated and set up), so the split is the one the fine-tunes evaluate on."""
    from hydra.utils import instantiate

    from seqattn.configs import compose_config

    out: set[str] = set()
    for seed in range(seeds):
        datamodule = instantiate(compose_config([*overrides, f"seed={seed}"]).data)
        datamodule.setup("fit")
        out |= {canonical(g["smiles"]) for g in datamodule.datasets["test"].graphs}
    return out


def case_freesolv_pretrain(ctx: Context) -> Result:
    """FreeSolv with 10 % of its training molecules labelled, with and without masked-atom pretraining."""
    return _freesolv_pretrain(ctx, FRACTION)


def case_freesolv_pretrain_full(ctx: Context) -> Result:
    """FreeSolv with all its training molecules labelled, with and without masked-atom pretraining."""
    return _freesolv_pretrain(ctx, 1.0)


def _freesolv_pretrain(ctx: Context, fraction: float) -> Result:
    """FreeSolv with and without masked-atom pretraining (issue 22).

    1. The unlabelled molecules: every SMILES of ``<data>/molecules/{freesolv,lipophilicity}.csv`` (targets
       not read) and the NCI molecules RDKit ships, once each (canonical SMILES), **without the test molecules
       of every evaluated split** (the labelled ``freesolv`` case's random split, seeds ``0..seeds-1``), written
       into the work folder (:func:`write_pretrain_smiles`);
    2. ``task=molecule_pretrain`` on them (``FREESOLV_PRETRAIN_EPOCHS``; its own random 10 % chooses the
       checkpoint by ``val/loss``), one run (seed 0) shared by both cases (``freesolv_pretrain`` and
       ``freesolv_pretrain_full``: the folder ``<work>/../freesolv_pretraining``);
    3. per seed, ``task=molecule`` on FreeSolv (target ``expt``, the ``freesolv`` case's split) with
       ``data.train_fraction=fraction`` of the training molecules labelled (the same seeded sample in both
       arms; val and test untouched): ``init_from=<pretrain run>/checkpoints/best.ckpt`` (with the
       ``finetune.pretrained_lr_mult`` of :data:`FREESOLV_PRETRAINED_LR_MULT`, chosen on val) vs the same recipe
       from scratch. Both arms train as the recipe does (its ``budget.steps``, capped at ``budget.max_epochs`` on
       the few-label set with early-stopping patience a quarter of the epochs) and test the best val/loss
       epoch's checkpoint: the length is chosen on validation, the same way in both arms.
    """
    freesolv = ctx.data / "molecules" / "freesolv.csv"
    sources = [ctx.data / "molecules" / name for name in FREESOLV_PRETRAIN_FILES] + [nci_smiles_path()]
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no {', '.join(missing)}")
    seeds = ctx.seeds or ctx.choose(FREESOLV_SEEDS, 1)
    label = "freesolv_pretrain" + ("" if fraction < 1.0 else "_full")
    scratch = ["task=molecule", f"data.path={freesolv}", "data.target_columns=[expt]", "cpu_threads=1", "plot=false",
               *([f"data.train_fraction={fraction}"] if fraction < 1.0 else []),
               *ctx.choose([], ["budget.steps=500", "budget.max_epochs=30"])]
    exclude = evaluated_test_smiles(scratch + ctx.extra, seeds)
    smi, counts = write_pretrain_smiles(_pretraining_folder(ctx, "freesolv_pretrain"), sources, exclude)
    epochs = ctx.choose(FREESOLV_PRETRAIN_EPOCHS, 1)
    pretrain = ["task=molecule_pretrain", f"data.path={smi}", f"trainer.max_epochs={epochs}", "cpu_threads=1",
                "seed=0"]
    metrics, pretrain_s, ckpt = _pretrain_once(ctx, pretrain, label, "freesolv_pretrain")
    written = sum(c["written"] for c in counts.values())
    made = (f"{written} molecules ({', '.join(f'{name}: {c}' for name, c in counts.items())}; the "
            f"{len(exclude)} test molecules of seeds 0..{seeds - 1} excluded)")
    ctx.log(f"{label}: pretrained {epochs} epochs in {pretrain_s:.0f} s on {made}: test/loss "
            f"{metrics['test/loss']:.3f}, test/acc {metrics['test/acc']:.3f}")
    mult = FREESOLV_PRETRAINED_LR_MULT[fraction]
    pretrained = scratch + [f"init_from={ckpt}", *([f"finetune.pretrained_lr_mult={mult:g}"] if mult != 1.0 else [])]
    share = f"{fraction:.0%} of the" if fraction < 1.0 else "all"
    return _pretrained_vs_scratch(
        ctx, label, pretrained, scratch,
        f"FreeSolv, {share} training molecules labelled (random 80/10/10 by seed; pretrained on {written:,} "
        "unlabelled molecules)", "test RMSE (expt, kcal/mol)",
        f"pretraining ({pretrain_s:.0f} s wall, {epochs} epochs, test masked-atom acc {metrics['test/acc']:.3f}, on "
        f"{made}): {command_line(pretrain)}", "val", key="test/rmse_expt", val_key="best_val/loss",
        lower_is_better=True, quick_note="QUICK: 1 seed, pretraining 1 epoch, fine-tunes budget.steps=500 "
        "(at most 30 epochs); ")
#: Cora: masked-node pretraining epochs (one full-graph step each; early stopping on the held-out nodes' val/loss)
CORA_PRETRAIN_EPOCHS = 500
#: ``--quick``: pretraining and fine-tune epochs
CORA_QUICK_EPOCHS = (5, 5)


def case_cora_pretrain(ctx: Context) -> Result:
    """Cora's 140 labels with and without masked-node pretraining on the whole graph (issue 22, item 4)."""
    return _cora_pretrain(ctx, "public")


def case_cora_pretrain_full(ctx: Context) -> Result:
    """Cora with all labels (PyG's Planetoid ``split="full"``: the 1,208 labelled nodes outside validation and
    test train), with and without masked-node pretraining on the whole graph."""
    return _cora_pretrain(ctx, "full")


def _cora_pretrain(ctx: Context, split: str) -> Result:
    """Cora with and without masked-node pretraining on the whole graph (issue 22, item 4).

    1. ``task=social_pretrain experiment=citation_graph_pretrain`` on the Planetoid Cora graph: every paper's
       features and every citation are inputs, no label is read; each step hides half of the training share
       of the nodes (a random 80 %; 10 % are held out to choose the checkpoint by ``val/loss``, 10 % to test it)
       and predicts which words each hidden paper has. The adapter and encoder settings are citation_graph's.
       One run (seed 0) serves both cases (``cora_pretrain`` and ``cora_pretrain_full``: the folder
       ``<work>/../cora_pretraining``).
    2. per seed, ``task=social experiment=citation_graph`` with ``init_from=<pretrain run>/checkpoints/best.ckpt``
       vs the same recipe from scratch, the recipe's own length (up to 200 epochs, early stopping on val
       accuracy, the best val epoch tested), on the Planetoid split ``split``: ``public`` (140 / 500 / 1,000
       labelled nodes) or ``full`` (``data.planetoid_split=full``: 1,208 / 500 / 1,000, every labelled node
       outside validation and test trains).
    """
    raw = ctx.data / "Cora" / "raw"
    if not raw.is_dir():
        raise FileNotFoundError(f"no Planetoid raw files at {raw}")
    label = "cora_pretrain" + ("" if split == "public" else f"_{split}")
    pretrain_epochs, finetune_epochs = ctx.choose((CORA_PRETRAIN_EPOCHS, None), CORA_QUICK_EPOCHS)
    graph = ["data.source=planetoid", "data.name=Cora", f"data.root={ctx.data}"]
    pretrain = ["task=social_pretrain", *graph, "experiment=citation_graph_pretrain",
                f"trainer.max_epochs={pretrain_epochs}", "seed=0"]
    metrics, pretrain_s, ckpt = _pretrain_once(ctx, pretrain, label, "cora_pretrain")
    ctx.log(f"{label}: pretrained ({metrics['epochs']} epochs) in {pretrain_s:.0f} s: "
            f"test/loss {metrics['test/loss']:.4f}")
    scratch = ["task=social", *graph, *([] if split == "public" else [f"data.planetoid_split={split}"]),
               "experiment=citation_graph", "plot=false",
               *([f"trainer.max_epochs={finetune_epochs}"] if finetune_epochs else [])]
    pretrained = scratch + [f"init_from={ckpt}"]
    labels = ("the Planetoid split's 140 labels" if split == "public"
              else "all labels (Planetoid split=full: 1,208 training nodes, the 500 val / 1,000 test unchanged)")
    return _pretrained_vs_scratch(
        ctx, label, pretrained, scratch, f"Cora, {labels} (pretrained on the whole graph, no labels)",
        "test accuracy", f"pretraining ({pretrain_s:.0f} s wall, {metrics['epochs']} epochs, test masked-node loss "
        f"{metrics['test/loss']:.4f}): {command_line(pretrain)}", "val")
