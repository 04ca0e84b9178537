"""The fine-tuning tasks of Yun et al. 2020 Appendix H.4, one class per task.

``config.finetune.task`` picks one once (``task(name)``, from ``TASKS``);
``train.mixing.finetune`` then asks it for everything that differs between
tasks and has no branch of its own:

    data(config, synsets, tok, max_len) -> (train arrays, test arrays, extra)
    model(cfg)                           -> the encoder with the task's head
    forward(model, params, batch, rng)   -> the head's outputs (dropout when rng)
    loss(outputs, batch)                 -> (loss, train metrics)
    scores(outputs, test, extra, f)      -> evaluation metrics of the test outputs
                                            (one host array tree per test batch)

``extra`` is what the task keeps beside its arrays; result.json's ``data`` records it
except its ``PRIVATE`` keys.
"""

from __future__ import annotations

import abc

import jax.numpy as jnp
import numpy as np

from transformer_ua.data import tasks
from transformer_ua.models import encoder as enc
from transformer_ua.train.tasks.mixing_pretrain import accuracy, xent


def subsample(n_total, n_max, seed):
  """Sorted indices of ``n_max`` of ``n_total`` items (all when n_max is 0 or >= n)."""
  idx = np.arange(n_total)
  if 0 < n_max < n_total:
    idx = np.sort(np.random.default_rng(seed).choice(n_total, n_max, replace=False))
  return idx


class Finetune(abc.ABC):
  """What a fine-tuning task supplies (see the module doc); ``forward`` is shared. A task
  that lacks one of the abstract methods cannot be instantiated (TypeError)."""

  name: str = ''
  PRIVATE: tuple = ()

  @abc.abstractmethod
  def data(self, config, synsets, tok, max_len):
    """(train arrays, test arrays, extra) of the task's examples, encoded to max_len."""

  @abc.abstractmethod
  def model(self, cfg: enc.EncoderConfig):
    """The encoder ``cfg`` with the task's head."""

  @staticmethod
  def forward(model, params, batch, rng=None):
    return model.apply({'params': params}, batch['input_ids'], batch['type_ids'],
                       batch['mask'], deterministic=rng is None,
                       rngs=None if rng is None else {'dropout': rng})

  @abc.abstractmethod
  def loss(self, outputs, batch):
    """(loss, train metrics) of the head's ``outputs`` on ``batch``."""

  @abc.abstractmethod
  def scores(self, outputs, test, extra, f):
    """Evaluation metrics of the test outputs (one host array tree per test batch)."""

  @staticmethod
  def _split(config, examples):
    """(train, test) examples of ``examples(heldout=...)``, subsampled per config."""
    d, f = config.data, config.finetune
    tr = examples(heldout=False, heldout_fraction=d.heldout_fraction)
    te = examples(heldout=True, heldout_fraction=d.heldout_fraction)
    tr = [tr[i] for i in subsample(len(tr), f.num_train_examples, 1)]
    te = [te[i] for i in subsample(len(te), f.num_eval_examples, 2)]
    return tr, te


class Relations(Finetune):
  """The MNLI analogue: the WordNet relation of a pair of synsets, a classifier head."""

  name = 'mnli'

  def data(self, config, synsets, tok, max_len):
    tr, te = self._split(config, lambda **kw: tasks.relation_pairs(synsets, **kw))
    train = tasks.encode_pairs(tok, synsets, tr, max_len)
    test = tasks.encode_pairs(tok, synsets, te, max_len)
    label, freq = tasks.majority_baseline(test['labels'])
    return train, test, {'majority_baseline_accuracy': 100 * freq,
                         'majority_label': tasks.RELATION_LABELS[label]}

  def model(self, cfg):
    return enc.BertClassifier(cfg, num_classes=len(tasks.RELATION_LABELS))

  def loss(self, outputs, batch):
    logits = outputs
    w = jnp.ones(logits.shape[:1])
    loss = xent(logits, batch['labels'], w)
    return loss, {'loss': loss, 'accuracy': accuracy(logits, batch['labels'], w)}

  def scores(self, outputs, test, extra, f):
    logits = np.concatenate(outputs)
    return {'accuracy': 100 * float((logits.argmax(-1) == test['labels']).mean())}


class Spans(Finetune):
  """The SQuAD analogue: the answer span in a gloss, start and end heads."""

  name = 'squad'
  PRIVATE = ('examples', 'offsets')

  def data(self, config, synsets, tok, max_len):
    tr, te = self._split(config, lambda **kw: tasks.span_examples(synsets, **kw))
    train, _, _ = tasks.encode_spans(tok, tr, max_len)
    test, kept, offsets = tasks.encode_spans(tok, te, max_len)
    return train, test, {'examples': kept, 'offsets': offsets,
                         'baselines': tasks.span_baselines(tr, kept)}

  def model(self, cfg):
    return enc.BertSpanPredictor(cfg)

  def loss(self, outputs, batch):
    s, e = outputs
    neg = jnp.finfo(s.dtype).min
    s = jnp.where(batch['context_mask'], s, neg)
    e = jnp.where(batch['context_mask'], e, neg)
    w = jnp.ones(s.shape[:1])
    loss = 0.5 * (xent(s, batch['starts'], w) + xent(e, batch['ends'], w))
    return loss, {'loss': loss, 'start_accuracy': accuracy(s, batch['starts'], w)}

  def scores(self, outputs, test, extra, f):
    s = np.concatenate([o[0] for o in outputs])
    e = np.concatenate([o[1] for o in outputs])
    st, en = tasks.best_spans(s, e, test['context_mask'], f.max_answer_tokens)
    offs = extra['offsets']
    rows = np.arange(len(st))
    preds = [ex.context[offs[r, a, 0]:offs[r, b, 1]]
             for r, a, b, ex in zip(rows, st, en, extra['examples'])]
    return tasks.span_scores(preds, [ex.answer_text for ex in extra['examples']])


#: The fine-tuning tasks by ``config.finetune.task`` name.
TASKS = {t.name: t for t in (Relations, Spans)}


def task(name: str) -> Finetune:
  """The task called ``name`` (ValueError naming the choices otherwise)."""
  if name not in TASKS:
    raise ValueError(f'unknown fine-tuning task {name!r}; choose one of {tuple(TASKS)}')
  return TASKS[name]()
