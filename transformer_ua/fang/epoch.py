"""Fang et al. 2022, Section 5: one compiled program per training epoch.

    train_epoch = make_train_epoch(config, tx, x_train, y_train)
    state, metrics = train_epoch(state, epoch_rng)

``epoch_rng`` is the epoch's host generator, ``np.random.default_rng([seed, epoch])``
-- the one the per-step loop of ``regression`` draws its order from -- so both paths
visit the same minibatches in the same order and a run can switch path at any
checkpoint. The host work of an epoch is that one permutation (N ints, one transfer);
then ONE jitted call, with x_train / y_train resident on the device:

    order = epoch_rng.permutation(N)                                  (host, once)
    for s in 0 .. S-1  (lax.scan; S = N // B full batches):
        idx = order[s B : (s+1) B];  state = step(state, x[idx], y[idx])
    if N % B:  state = step(state, x[rest], y[rest])   (the last, smaller batch)
    metrics = {'losses': [per-step batch MSE], 'sizes': [batch sizes],
               'train_mse': sum_s loss_s size_s / N}

``step`` is ``regression.train_step_fn`` (clip, SGD with the one-cycle schedule), the
per-step path's own step; only the batch loss-and-gradient can differ:

* ``config.attention_grad = 'tokens'``: the per-step path's chunked autodiff of the
  compact model (``regression.batch_loss_and_grad``): same losses up to float
  summation order.
* ``'monomials'`` (ATTENTION only): the same function of the same parameters, summed
  in the monomial basis (Lemma 3.3's multinomial identity; ``optimum`` writes it out):

      C(x) = Phi(x) . c,   c = c(F, beta, b) [P]:  c_0 = b,
      c_a = multinom(|a|; a) sum_i beta[i, |a|] (-F_i)^a   (1 <= |a| <= q),

  with Phi(x) = [x^a] (P = C(d+q, q) monomials; 3003 for f2). Per chunk of rows:
  pred = Phi c, loss += |pred - y|^2, g_c += 2 Phi^T (pred - y); then one VJP of
  c(F, beta, b) turns g_c into the parameter gradient. Cost per example O(P), not
  O(n q): independent of the token count. Rounding differs from the token path (a
  different, exact rewriting, not only a different order); the agreement is measured
  (tests/test_fang_epoch.py; benchmarks/fang_epoch_cost.py on the real f2 batch).
  Monomials are built by one multiply per column from a parent monomial: x^a =
  x^{a - e_j} x_j, j = the first non-zero exponent of a.

Data parallelism is the per-step path's (``regression.make_train_step`` with a mesh);
this epoch is one device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.fang import regression, ridge

EPOCH_MODES = ('per_step', 'scan')
ATTENTION_GRADS = ('tokens', 'monomials')


def monomial_tables(d: int, q: int):
  """(parent [P], var [P], degree [P], multinom [P]) for the exponents of degree <= q in
  graded order (index 0 = the constant): x^a = x^parent[a] * x[var[a]]."""
  exps = [a for s in range(q + 1) for a in ridge.exponents(d, s)]
  index = {a: i for i, a in enumerate(exps)}
  parent, var = [0], [0]
  for a in exps[1:]:
    j = next(k for k, e in enumerate(a) if e)
    parent.append(index[a[:j] + (a[j] - 1,) + a[j + 1:]])
    var.append(j)
  deg = [sum(a) for a in exps]
  mult = [ridge.multinomial(a) for a in exps]
  return np.asarray(parent), np.asarray(var), np.asarray(deg), np.asarray(mult)


def monomials(x, tables):
  """Phi(x) [rows, P]: the monomials of x [rows, d], built degree by degree."""
  parent, var, deg, _ = tables
  cols = jnp.ones((x.shape[0], 1), x.dtype)
  for k in range(1, int(deg.max()) + 1):
    sel = np.nonzero(deg == k)[0]
    cols = jnp.concatenate([cols, cols[:, parent[sel]] * x[:, var[sel]]], axis=1)
  return cols


def attention_coefficients(params, tables):
  """c(F, beta, b) [P]: the compact ATTENTION model's monomial coefficients."""
  _, _, deg, mult = tables
  pw = monomials(-params['F'], tables)                                  # [n, P]
  beta = params['beta'][:, np.maximum(deg, 1) - 1]                      # [n, P]
  c = jnp.asarray(mult, pw.dtype) * jnp.sum(beta * pw, axis=0)
  return jnp.where(jnp.asarray(deg) == 0, params['b'], c)


def monomial_loss_and_grad(tables, grad_chunk: int):
  """(params, x [B, d], y [B]) -> (mean squared error, gradient) of the ATTENTION model
  through its monomial coefficients (module doc), rows in chunks of ``grad_chunk``."""

  def sums(c, x, y):
    phi = monomials(x, tables)
    e = phi @ c - y
    return jnp.sum(e * e), phi.T @ (2 * e)

  def run(params, x, y):
    c, vjp = jax.vjp(lambda p: attention_coefficients(p, tables), params)
    size = x.shape[0]
    nc = size // grad_chunk
    total, gc = jnp.zeros((), y.dtype), jnp.zeros_like(c)
    if nc:
      def body(carry, xy):
        l, g = sums(c, *xy)
        return (carry[0] + l, carry[1] + g), None
      (total, gc), _ = jax.lax.scan(
          body, (total, gc), (x[:nc * grad_chunk].reshape(nc, grad_chunk, -1),
                              y[:nc * grad_chunk].reshape(nc, grad_chunk)))
    if size % grad_chunk:
      l, g = sums(c, x[nc * grad_chunk:], y[nc * grad_chunk:])
      total, gc = total + l, gc + g
    (grads,) = vjp(gc / size)
    return total / size, grads

  return run


def validate(config) -> None:
  """One-line ValueErrors for the epoch flags."""
  mode = config.get('train_epoch', 'per_step')
  if mode not in EPOCH_MODES:
    raise ValueError(f'config.train_epoch={mode!r}; allowed: {EPOCH_MODES}.')
  grad = config.get('attention_grad', 'tokens')
  if grad not in ATTENTION_GRADS:
    raise ValueError(f'config.attention_grad={grad!r}; allowed: {ATTENTION_GRADS}.')


def make_train_epoch(config, tx, x_train: np.ndarray, y_train: np.ndarray):
  """``train_epoch(state, epoch_rng) -> (state, metrics)`` (module doc); state donated.

  x_train [N, d], y_train [N]: numpy arrays in the run's dtype, put on the device once.
  """
  validate(config)
  sizes = regression.resolved_sizes(config)
  if config.model == 'attention' and config.get('attention_grad', 'tokens') == 'monomials':
    loss_and_grad = monomial_loss_and_grad(monomial_tables(sizes['d'], sizes['q']),
                                           config.grad_chunk)
  else:
    loss_and_grad = regression.batch_loss_and_grad(config.model, config.grad_chunk)
  step = regression.train_step_fn(tx, loss_and_grad)
  x_dev, y_dev = jnp.asarray(x_train), jnp.asarray(y_train)
  n, bsz = x_train.shape[0], int(config.batch_size)
  full, rest = divmod(n, bsz)
  sizes_list = [bsz] * full + ([rest] if rest else [])

  def epoch(state, x, y, order):
    losses = []
    if full:
      def body(st, idx):
        st, loss = step(st, {'x': x[idx], 'y': y[idx]})
        return st, loss
      state, losses = jax.lax.scan(body, state, order[:full * bsz].reshape(full, bsz))
      losses = [losses]
    if rest:
      idx = order[full * bsz:]
      state, loss = step(state, {'x': x[idx], 'y': y[idx]})
      losses.append(loss[None])
    return state, jnp.concatenate(losses)

  compiled = jax.jit(epoch, donate_argnums=0)

  def train_epoch(state, epoch_rng):
    order = jnp.asarray(epoch_rng.permutation(n).astype(np.int32))
    state, losses = compiled(state, x_dev, y_dev, order)
    losses = np.asarray(losses, np.float64)
    total = 0.0
    for loss, size in zip(losses, sizes_list):     # the per-step loop's sum, same order
      total += float(loss) * size
    return state, {'losses': losses, 'sizes': np.asarray(sizes_list), 'train_mse': total / n}

  return train_epoch
