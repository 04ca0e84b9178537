"""The training tasks, beside each other; each is what ``train.loop.run`` trains.

Every task answers the one protocol of the loop (``train.loop.Task``):

    state, scalars = task.train_epoch(state, unit)    # one unit: a step or an epoch
    scalars        = task.evaluate(state)

  fang_regression   ``FangRegression``: one unit = one epoch of SGD updates on Fang et
                    al. 2022's regression (``train.fang_regression.train_and_evaluate``)
  steps             ``Steps``: one unit = one optimizer step of a Section H BERT run
                    (pre-training and fine-tuning alike)
  mixing_pretrain   ``Pretrain``: the objective of a ``Steps`` pre-training run (masked LM
                    + sentence pair; ``train.mixing.pretrain``)
  mixing_finetune   ``Relations`` (MNLI analogue), ``Spans`` (SQuAD analogue): the
                    objectives of fine-tuning, one class per task, chosen once by name
                    (``TASKS``; ``train.mixing.finetune``)

An objective supplies what differs between runs of one driver: its head (``model``),
``forward``, ``loss`` and its evaluation metrics; the driver does the rest the same way.
"""
