"""Training infrastructure shared by the experiments, and the training runs built on it.

  checkpointing    ``Checkpointer``: orbax checkpoints, so long runs resume after an
                   interruption.
  metrics          ``MetricsWriter``: per-step JSON lines, TensorBoard events, PNG curves.
  loop             ``run``: the one training loop (resume, log, evaluate, checkpoint,
                   data-parallel mesh; SIGINT / SIGTERM checkpoint first).
  tasks/           what the loop trains, one class per task: ``FangRegression``,
                   ``Steps`` with ``Pretrain`` and the fine-tuning tasks (Section H).
  fang_regression  Fang et al. 2022, Section 5 on the loop (``train_and_evaluate``).
  fang_baselines   Section 5 against tuned baselines (one tuning budget per model).
  mixing           the Section H drivers on the loop (``pretrain``, ``finetune``) of the
                   models in ``transformer_ua.models``.

Run provenance (command, revision, machine, load) lives in ``transformer_ua.provenance``;
the interrupt the loop raises after its checkpoint in ``transformer_ua.interrupts``.
"""
