"""Training machinery around Lightning: callbacks, checkpoint IO, fine-tuning, exact resume, sweep summaries.

- :mod:`~seqattn.training.callbacks`: per-epoch summary, the progress bar and model summary, atomic
  checkpoint IO, last.ckpt every N steps, exact-resume random states;
- :mod:`~seqattn.training.checkpoint`: reading a checkpoint safely and rebuilding its model;
- :mod:`~seqattn.training.finetune`: ``init_from=`` / ``freeze=`` / pretrained learning-rate scale;
- :mod:`~seqattn.training.options`: the ``trainer`` group checked (keys, value types) before any work;
- :mod:`~seqattn.training.plan`: the run plan (epochs from ``budget.steps``, checkpoint selection without a
  validation split), saved as ``run_plan.json``;
- :mod:`~seqattn.training.quiet`: the known messages of Lightning and PyTorch a user cannot act on, silenced;
- :mod:`~seqattn.training.resume`: ``resume=RUN_DIR``, resumable train loaders;
- :mod:`~seqattn.training.sweep`: the summary table of a Hydra multirun;
- :mod:`~seqattn.training.time_budget`: ``budget.seconds``, a run shortened to a time budget with its schedule.
"""
