"""BERT-style encoder with a per-layer mixing layer (Yun et al. 2020, Appendix H.3-H.4).

A practical model family for the Section H experiments, separate from the
paper-faithful layers of the constructions (``transformer_ua/layers.py``).

Shape glossary:

    B batch   n tokens (<= max_len)   d hidden   r mlp_dim   V vocab   P masked positions

    Encoder:   input_ids, type_ids [B, n] int, mask [B, n] bool  ->  [B, n, d]
      x = LN(word[input_ids] + position[:n] + type[type_ids]);  dropout
      for each layer l (kind_l in attention | average | bilinear | sepconv):
        x = LN(x + dropout(mix_l(x, mask)))                   (post-LN, as BERT)
        x = LN(x + dropout(W_2 gelu(W_1 x + b_1) + b_2))       (r = mlp_dim)
    Pooler:    tanh(W [CLS] + b)                              [B, d]
    MLM head:  LN(gelu(W h + b)) . word^T + bias              [B, P, V] (tied weights)
    NSP head:  Dense(2) on the pooled [CLS]                   [B, 2]
    Classifier head: Dense(num_classes) on the pooled [CLS]   [B, C]
    Span head: Dense(2) per token -> start, end logits        [B, n] each

Packed rows (pre-training with sequence packing, ``transformer_ua.data.text``): the
optional ``segment_ids [B, n]``, ``positions [B, n]`` and ``cls_positions [B, S]``
(the encoder alone takes ``num_segments`` = S instead of ``cls_positions``) make every
instance of a row its own sequence: positions restart at 0 per instance
(``position[positions]`` instead of ``position[:n]``), every mixing layer mixes only
within an instance (``transformer_ua.models.mixers``), and the pooler / NSP head read
each instance's [CLS]: ``nsp_logits [B, S, 2]``. No new parameters; without them the
computation is the unpacked one, unchanged.

With ``mixing='attention'``, ``num_conv_layers=0``, V = 30522, max_len = 512,
d = 768, 12 layers, 12 heads, r = 3072 the encoder + pooler is BERT-base exactly
(109,482,240 parameters, as Hugging Face's ``BertModel``).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import layers
from transformer_ua.models import mixers as mixing_lib


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  vocab_size: int
  max_len: int = 128
  hidden: int = 128
  num_layers: int = 4
  num_heads: int = 4
  mlp_dim: int = 512
  dropout: float = 0.1
  mixing: str = 'attention'      # attention | average | bilinear | sepconv
  num_conv_layers: int = 0       # k: the first k layers are sepconv (Figure 1 hybrids)
  conv_filters: int = 16         # H of the lightweight convolution
  conv_width: int = 128          # K
  type_vocab_size: int = 2

  @property
  def kinds(self) -> tuple[str, ...]:
    return mixing_lib.layer_kinds(self.mixing, self.num_layers, self.num_conv_layers)

  def validate(self) -> 'EncoderConfig':
    self.kinds  # pylint: disable=pointless-statement
    for name in ('vocab_size', 'max_len', 'hidden', 'num_layers', 'num_heads', 'mlp_dim',
                 'conv_filters', 'conv_width'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be >= 1, got {getattr(self, name)}')
    if self.hidden % self.num_heads:
      raise ValueError(f'hidden={self.hidden} is not divisible by num_heads={self.num_heads}')
    if 'sepconv' in self.kinds and self.hidden % self.conv_filters:
      raise ValueError(f'hidden={self.hidden} is not divisible by '
                       f'conv_filters={self.conv_filters}')
    if not 0.0 <= self.dropout < 1.0:
      raise ValueError(f'dropout must be in [0, 1), got {self.dropout}')
    return self


def _dense(features, name):
  return nn.Dense(features, name=name, kernel_init=nn.initializers.normal(0.02))


class Block(nn.Module):
  cfg: EncoderConfig
  kind: str

  @nn.compact
  def __call__(self, x, mask, deterministic, segment_ids=None, positions=None,
               num_segments=None):
    c = self.cfg
    mix = mixing_lib.make_mixing(self.kind, num_heads=c.num_heads, max_len=c.max_len,
                                 conv_filters=c.conv_filters, conv_width=c.conv_width,
                                 dropout=c.dropout, name=self.kind)
    u = mix(x, mask, segment_ids=segment_ids, positions=positions,
            num_segments=num_segments, deterministic=deterministic)
    x = nn.LayerNorm(epsilon=1e-12, name='mix_norm')(
        x + nn.Dropout(c.dropout)(u, deterministic=deterministic))
    h = nn.gelu(_dense(c.mlp_dim, 'mlp_in')(x), approximate=False)
    h = _dense(c.hidden, 'mlp_out')(h)
    return nn.LayerNorm(epsilon=1e-12, name='mlp_norm')(
        x + nn.Dropout(c.dropout)(h, deterministic=deterministic))


class Encoder(nn.Module):
  """Embeddings + blocks; ``attend`` gives the tied output embedding of the MLM head."""
  cfg: EncoderConfig

  def setup(self):
    c = self.cfg.validate()
    init = nn.initializers.normal(0.02)
    self.word = nn.Embed(c.vocab_size, c.hidden, embedding_init=init, name='word')
    self.position = self.param('position', init, (c.max_len, c.hidden))
    self.token_type = nn.Embed(c.type_vocab_size, c.hidden, embedding_init=init,
                               name='token_type')
    self.norm = nn.LayerNorm(epsilon=1e-12, name='embed_norm')
    self.drop = nn.Dropout(c.dropout)
    self.blocks = [Block(c, kind, name=f'layer_{i}') for i, kind in enumerate(c.kinds)]

  def __call__(self, input_ids, type_ids, mask, *, segment_ids=None, positions=None,
               num_segments=None, deterministic: bool = True):
    n = input_ids.shape[-1]
    if n > self.cfg.max_len:
      raise ValueError(f'sequence length {n} exceeds max_len={self.cfg.max_len}')
    if (segment_ids is None) != (positions is None):
      raise ValueError('packed rows need both segment_ids and positions')
    pos = self.position[:n] if positions is None else self.position[positions]
    x = self.word(input_ids) + pos + self.token_type(type_ids)
    x = self.drop(self.norm(x), deterministic=deterministic)
    for block in self.blocks:
      x = block(x, mask, deterministic, segment_ids, positions, num_segments)
    return x

  def attend(self, h):
    return self.word.attend(h)


class Pooler(nn.Module):
  hidden: int

  @nn.compact
  def __call__(self, seq, cls_positions=None):
    """[CLS] at row index 0 (``[B, d]``) or at ``cls_positions [B, S]`` (``[B, S, d]``)."""
    cls = (seq[..., 0, :] if cls_positions is None
           else jnp.take_along_axis(seq, cls_positions[..., None], axis=-2))
    return jnp.tanh(_dense(self.hidden, 'dense')(cls))


class BertPretrainer(nn.Module):
  """Encoder + pooler + masked-LM head (tied) + NSP head.

  Returns ``(mlm_logits [B, P, V], nsp_logits [B, 2])``, or ``nsp_logits [B, S, 2]``
  for packed rows (``segment_ids``, ``positions``, ``cls_positions``).
  """
  cfg: EncoderConfig

  def setup(self):
    self.encoder = Encoder(self.cfg)
    self.pooler = Pooler(self.cfg.hidden)
    self.mlm_transform = _dense(self.cfg.hidden, 'mlm_transform')
    self.mlm_norm = nn.LayerNorm(epsilon=1e-12, name='mlm_norm')
    self.mlm_bias = self.param('mlm_bias', nn.initializers.zeros, (self.cfg.vocab_size,))
    self.nsp = _dense(2, 'nsp')

  def __call__(self, input_ids, type_ids, mask, mlm_positions, *, segment_ids=None,
               positions=None, cls_positions=None, deterministic=True):
    if (segment_ids is None) != (cls_positions is None):
      raise ValueError('packed rows need segment_ids, positions and cls_positions together')
    seq = self.encoder(input_ids, type_ids, mask, segment_ids=segment_ids,
                       positions=positions,
                       num_segments=None if cls_positions is None else cls_positions.shape[-1],
                       deterministic=deterministic)
    h = jnp.take_along_axis(seq, mlm_positions[..., None], axis=-2)      # [B, P, d]
    h = self.mlm_norm(nn.gelu(self.mlm_transform(h), approximate=False))
    mlm_logits = self.encoder.attend(h) + self.mlm_bias
    return mlm_logits, self.nsp(self.pooler(seq, cls_positions))


class BertClassifier(nn.Module):
  """Encoder + pooler + Dense(num_classes) (the MNLI-analogue fine-tuning model)."""
  cfg: EncoderConfig
  num_classes: int = 3

  @nn.compact
  def __call__(self, input_ids, type_ids, mask, *, deterministic=True):
    seq = Encoder(self.cfg, name='encoder')(input_ids, type_ids, mask,
                                             deterministic=deterministic)
    pooled = Pooler(self.cfg.hidden, name='pooler')(seq)
    pooled = nn.Dropout(self.cfg.dropout)(pooled, deterministic=deterministic)
    return _dense(self.num_classes, 'classifier')(pooled)


class BertSpanPredictor(nn.Module):
  """Encoder + per-token Dense(2): ``(start_logits, end_logits)``, each ``[B, n]``."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, input_ids, type_ids, mask, *, deterministic=True):
    seq = Encoder(self.cfg, name='encoder')(input_ids, type_ids, mask,
                                             deterministic=deterministic)
    logits = _dense(2, 'span')(seq)
    return logits[..., 0], logits[..., 1]




def init_shapes(model: nn.Module, max_len: int, num_predictions: int = 0):
  """Parameter ShapeDtypeStructs without allocating (``jax.eval_shape``)."""
  ids = jnp.zeros((1, max_len), jnp.int32)
  mask = jnp.ones((1, max_len), bool)
  args = (ids, ids, mask)
  if isinstance(model, BertPretrainer):
    args += (jnp.zeros((1, max(1, num_predictions)), jnp.int32),)
  return jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), *args))['params']


def param_counts(cfg: EncoderConfig) -> dict[str, int]:
  """Parameters of the encoder alone, encoder + pooler (Table 1's '# params'), and the
  full pre-training model."""
  pre = init_shapes(BertPretrainer(cfg), cfg.max_len, 1)
  return {'encoder': layers.count_params(pre['encoder']),
          'encoder_pooler': layers.count_params(pre['encoder']) + layers.count_params(pre['pooler']),
          'pretrainer': layers.count_params(pre)}
