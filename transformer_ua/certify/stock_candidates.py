r"""Stock encoder blocks as candidates of ``train_and_certify``: a Flax module, its parameter
count, its initialization, and the network the certifier reads from it.

The architecture (``StockBlock``, the block of ``nn.TransformerEncoderLayer`` written with
``flax.linen``), X [B, n, d]:

    Z_0 = X W_e + b_e                                        Dense(d -> D)
    Attn(Z) = concat_i softmax((Z Wq_i + bq_i)(Z Wk_i + bk_i)^T / sqrt(m)) (Z Wv_i + bv_i)
              Wo + bo                                        MultiHeadDotProductAttention,
                                                             h heads of m = D / h, biases on
    FF(Z)   = act(Z W_1 + b_1) W_2 + b_2                     Dense(r), act, Dense(D)
    post-LN:  Z <- LN(Z + Attn(Z));  Z <- LN(Z + FF(Z))      (torch's default placement)
    pre-LN:   Z <- Z + Attn(LN(Z));  Z <- Z + FF(LN(Z))      (norm_first=True; no final LN)
    Y = Z W_r + b_r                                          Dense(D -> d)

with LN = flax's LayerNorm (gain, bias, eps 1e-6) and act one of relu, gelu (the erf form,
torch's default ``activation='gelu'``: ``nn.gelu(approximate=False)``) and gelu_tanh
(flax's default ``nn.gelu``). Its parameters, counted by hand:

    embed d D + D;  Q, K, V 3 (D h m + h m);  O h m D + D;  two LayerNorms 2 (2 D);
    FF D r + r + r D + D;  readout D d + d.

The trainer's stock candidates (``candidates``) are the architectures named in
``ARCHITECTURES`` beyond 'ladder': D = 8, h = 2 (m = 4), r = FIRST_WIDTH, 2 FIRST_WIDTH,
..., <= max_width, in the norm x activation of each name (D = 8, h = 2, r = 32 is the layer
of item 6, 897 parameters at d = 1). A candidate trains in float64 (the trainer's ``train``:
``module.apply({'params': params}, x)``), initialized by ``module.init`` from its seed (flax's
initializers) with every leaf cast to float64. ``stored`` rounds the weights to the
certified storage dtype and reads the network through ``flax_import`` (the jaxpr of the
apply): the ``Net`` the trainer samples, and the ``(module, variables)`` pair that
``certify_network`` is given, which reads it again and checks it against the Flax apply
(``source_check``). A float64 arithmetic reads and certifies under ``jax.enable_x64`` so
that the source runs in float64 (``certify_context``).

Low-precision training (``operand_dot_general``): for a TF32 or bfloat16 certificate the
block trains with every matmul's operands reduced to the operand format's p significand
bits (p = 11, 8; round to nearest, ties to even), straight-through:

    x~ = x + stop_gradient(rnd_p(x) - x),   rnd_p(x) = round(m 2^p) 2^(e - p),  x = m 2^e,
                                            1/2 <= |m| < 1

in the Dense layers, the Q/K/V and output projections, the scores and the mix (Flax's
``dot_general`` hooks), so the loss sees the operand rounding while the gradient is the
float64 one. The block read and certified is the plain one (``operand`` None): the
runtime's reduction is the rounding model's to bound, not part of g.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.networks import flax_import, network_dict

#: The architectures ``train_and_certify`` may try: today's ladder and the stock blocks.
ARCHITECTURES = ('ladder', 'stock_post_relu', 'stock_post_gelu', 'stock_pre_relu',
                 'stock_pre_gelu')
#: Each stock architecture's (norm placement, activation).
STOCK = {'stock_post_relu': ('post', 'relu'), 'stock_post_gelu': ('post', 'gelu'),
         'stock_pre_relu': ('pre', 'relu'), 'stock_pre_gelu': ('pre', 'gelu')}
#: Model width D and heads h of the stock candidates (m = D / h).
D_MODEL, HEADS = 8, 2
#: The activations of ``StockBlock``.
ACTIVATIONS = {'relu': nn.relu, 'gelu': lambda t: nn.gelu(t, approximate=False),
               'gelu_tanh': nn.gelu}


class StockBlock(nn.Module):
  """Dense embed, one encoder block (module docstring), Dense readout."""

  d: int
  d_model: int = D_MODEL
  heads: int = HEADS

  #: The training recipe (steps, lr, batch) unless the caller gives its own: the one that
  #: took the post-LN gelu block to its certificate at 0.05 and 0.02 (results/yun/trained).
  RECIPE = (40000, 3e-3, 256)
  width: int = 32
  norm: str = 'post'
  activation: str = 'relu'
  operand_bits: int | None = None      # training only: operands reduced (module docstring)

  @nn.compact
  def __call__(self, x):
    act = ACTIVATIONS[self.activation]
    if self.operand_bits is None:
      dense = nn.Dense
      attn = nn.MultiHeadDotProductAttention(num_heads=self.heads)
    else:
      dg = operand_dot_general(self.operand_bits)
      dense = functools.partial(nn.Dense, dot_general=dg)
      attn = nn.MultiHeadDotProductAttention(
          num_heads=self.heads, qkv_dot_general=dg, out_dot_general=dg,
          attention_fn=functools.partial(nn.dot_product_attention, einsum_dot_general=dg))
    z = dense(self.d_model)(x)

    def ff(t):
      return dense(self.d_model)(act(dense(self.width)(t)))
    if self.norm == 'pre':
      z = z + attn(nn.LayerNorm()(z))
      z = z + ff(nn.LayerNorm()(z))
    else:
      z = nn.LayerNorm()(z + attn(z))
      z = nn.LayerNorm()(z + ff(z))
    return nn.Dense(self.d)(z)


def reduce_operand(x, bits: int):
  """x rounded to ``bits`` significand bits, to nearest with ties to even (zero kept)."""
  m, e = jnp.frexp(x)
  return jnp.ldexp(jnp.round(m * 2.0 ** bits), e - bits)


def operand_dot_general(bits: int):
  """A ``lax.dot_general`` whose operands are reduced to ``bits`` significand bits in the
  forward pass and pass the gradient unchanged (straight-through)."""
  def ste(a):
    return a + jax.lax.stop_gradient(reduce_operand(a, bits) - a)

  def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                  **kwargs):
    return jax.lax.dot_general(ste(lhs), ste(rhs), dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type, **kwargs)
  return dot_general


def check_architectures(architectures) -> tuple:
  """``architectures`` as a tuple of names of ARCHITECTURES (one line otherwise)."""
  names = (architectures,) if isinstance(architectures, str) else architectures
  try:
    out = tuple(names)
  except TypeError:
    out = ()
  bad = [a for a in out if not isinstance(a, str) or a not in ARCHITECTURES]
  if not out or bad or len(set(out)) != len(out):
    raise ValueError(f'architectures={architectures!r}; give a non-empty list of distinct '
                     f'names among {ARCHITECTURES}.')
  return out


@dataclasses.dataclass(frozen=True)
class StockCandidate:
  """One stock block (module docstring) for inputs of width d."""

  norm: str
  activation: str
  width: int
  d: int
  d_model: int = D_MODEL
  heads: int = HEADS

  #: The training recipe (steps, lr, batch) unless the caller gives its own: the one that
  #: took the post-LN gelu block to its certificate at 0.05 and 0.02 (results/yun/trained).
  RECIPE = (40000, 3e-3, 256)

  def network(self) -> StockBlock:
    return StockBlock(self.d, self.d_model, self.heads, self.width, self.norm,
                      self.activation)

  def training_network(self, operand_bits: int | None) -> StockBlock:
    """The block as it trains: with its matmul operands reduced to ``operand_bits``
    significand bits, straight-through (module docstring), or plain (None)."""
    return StockBlock(self.d, self.d_model, self.heads, self.width, self.norm,
                      self.activation, operand_bits)

  def num_params(self) -> int:
    D, h, r, d = self.d_model, self.heads, self.width, self.d
    m = D // h
    return (d * D + D) + 3 * (D * h * m + h * m) + (h * m * D + D) + 2 * (2 * D) + \
        (D * r + r + r * D + D) + (D * d + d)

  def label(self) -> str:
    return (f'stock {self.norm}-LN {self.activation} D={self.d_model} h={self.heads} '
            f'm={self.d_model // self.heads} r={self.width}')

  def init(self, seed: int, n: int, d: int):
    """``module.init`` from ``seed``, every leaf float64. Call inside ``jax.enable_x64``."""
    variables = self.network().init(jax.random.PRNGKey(seed), jnp.zeros((1, n, d)))
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), variables['params'])

  def certify_context(self, dtype):
    """The context the read and the certificate run in: x64 for a float64 storage dtype."""
    return jax.enable_x64(True) if np.dtype(dtype) == np.float64 else contextlib.nullcontext()

  def stored(self, params, d: int, n: int, dtype):
    """(params, Net, g): the weights rounded to ``dtype`` (held as float64), the network
    flax_import reads from them, and g = (module, variables) for ``certify_network``."""
    params = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype).astype(np.float64), params)
    module = self.network()
    wide = np.dtype(dtype) == np.float64
    with self.certify_context(dtype):
      variables = {'params': jax.tree_util.tree_map(
          lambda a: jnp.asarray(a, jnp.float64 if wide else jnp.float32), params)}
      raw = flax_import.read(module, variables, d=d, n=n, wide=wide)[0]
    return params, network_dict.check(raw, d=d, n=n), (module, variables)


def candidates(d: int, max_width: int, architectures, first_width: int) -> list:
  """The stock candidates of ``architectures`` (names of STOCK; 'ladder' is the trainer's):
  each r = first_width, 2 first_width, ..., <= max_width, in the order the names are given
  (the trainer sorts all its candidates by parameter count)."""
  out = []
  for name in architectures:
    if name not in STOCK:
      continue
    norm, act = STOCK[name]
    r = first_width
    while r <= max_width:
      out.append(StockCandidate(norm, act, r, d))
      r *= 2
  return out
