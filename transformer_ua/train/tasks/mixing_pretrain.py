"""``Pretrain``: the pre-training objective of Yun et al. 2020 Appendix H.3 (masked LM +
sentence pair), trained one step per unit (``steps.Steps``) by
``train.mixing.pretrain``. Also the weighted losses the fine-tuning tasks share.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

from transformer_ua.models import encoder as enc


def xent(logits, labels, weights):
  """Weighted mean softmax cross-entropy of integer ``labels``."""
  ll = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  return (ll * weights).sum() / jnp.maximum(weights.sum(), 1e-9)


def accuracy(logits, labels, weights):
  """Weighted mean of ``argmax(logits) == labels`` (a fraction, not %)."""
  return ((logits.argmax(-1) == labels) * weights).sum() / jnp.maximum(weights.sum(), 1e-9)


class Pretrain:
  """Masked LM + sentence pair on a ``BertPretrainer``: head, forward, loss, metrics."""

  name = 'pretrain'

  def model(self, cfg: enc.EncoderConfig):
    return enc.BertPretrainer(cfg)

  @staticmethod
  def forward(model, params, batch, rng=None):
    """(MLM logits, sentence-pair logits); dropout on when ``rng`` is given."""
    packed = {k: batch[k] for k in ('segment_ids', 'positions', 'cls_positions')
              if k in batch}                      # packed rows (data.max_segments > 1)
    return model.apply({'params': params}, batch['input_ids'], batch['type_ids'],
                       batch['mask'], batch['mlm_positions'], **packed,
                       deterministic=rng is None,
                       rngs=None if rng is None else {'dropout': rng})

  def loss(self, outputs, batch):
    """(MLM + sentence-pair loss, the train metrics)."""
    mlm, nsp = outputs
    mlm_loss = xent(mlm, batch['mlm_ids'], batch['mlm_weights'])
    nsp_loss = xent(nsp, batch['nsp_labels'], batch['nsp_weights'])
    loss = mlm_loss + nsp_loss
    return loss, {'loss': loss, 'mlm_loss': mlm_loss, 'nsp_loss': nsp_loss,
                  'mlm_accuracy': accuracy(mlm, batch['mlm_ids'], batch['mlm_weights']),
                  'nsp_accuracy': accuracy(nsp, batch['nsp_labels'], batch['nsp_weights'])}

  def eval_sums(self, outputs, batch):
    """Sums of one held-out batch (added over the batches, then ``scores``)."""
    mlm, nsp = outputs
    w, nw = batch['mlm_weights'], batch['nsp_weights']
    return jnp.stack([
        ((mlm.argmax(-1) == batch['mlm_ids']) * w).sum(), w.sum(),
        (optax.softmax_cross_entropy_with_integer_labels(mlm, batch['mlm_ids']) * w).sum(),
        ((nsp.argmax(-1) == batch['nsp_labels']) * nw).sum(), nw.sum()])

  def scores(self, s):
    """The held-out metrics of the summed ``eval_sums`` ``s``."""
    return {'mlm_accuracy': 100 * s[0] / s[1], 'mlm_loss': s[2] / s[1],
            'nsp_accuracy': 100 * s[3] / s[4]}
