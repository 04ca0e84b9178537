"""The class Phi (validation, evaluation) and Lemma 6's four-ReLU realization."""

import numpy as np
import pytest

from transformer_ua import activations
from transformer_ua.activations import Phi

# One member of Phi per placement of the constant piece, discontinuous where possible.
PHIS = {
    'constant_first': Phi((0.0, 1.0), ((0.0, 2.0), (1.0, -1.0), (-3.0, 4.0))),
    'constant_middle': Phi((0.0, 1.0), ((-1.0, -5.0), (0.0, 0.0), (-1.0, -5.0))),
    'constant_last': Phi((-1.0, 0.5), ((2.0, 1.0), (-1.0, 3.0), (0.0, 7.0))),
    'two_pieces_constant_last': Phi((0.25,), ((3.0, 0.0), (0.0, -2.0))),
    'bump_closed_interval': Phi((1.0, 3.0), ((0.0, 1.0), (0.0, 0.0), (0.0, 1.0)),
                                left_closed=(False, True)),
    'relu': activations.RELU,
}


@pytest.mark.parametrize('kwargs, message', [
    (dict(breaks=(0., 1., 2.), pieces=((0, 0),) * 4), 'allows 1 to 3 pieces'),
    (dict(breaks=(0.,), pieces=((0, 0), (1, 0), (2, 0))), 'needs exactly k - 1 breakpoints'),
    (dict(breaks=(0.,), pieces=((0, 0), (1, 0)), left_closed=(True, False)),
     'one flag per breakpoint'),
    (dict(breaks=(0.,), pieces=((0, 0), (1,))), 'must be a pair'),
    (dict(breaks=(float('nan'),), pieces=((0, 0), (1, 0))), 'non-finite'),
    (dict(breaks=(0., float('inf')), pieces=((0, 0), (1, 0), (1, 1))), 'non-finite'),
    (dict(breaks=(1., 1.), pieces=((0, 0), (1, 0), (2, 0))), 'not strictly increasing'),
    (dict(breaks=(2., 1.), pieces=((0, 0), (1, 0), (2, 0))), 'not strictly increasing'),
    (dict(breaks=(0.,), pieces=((1, 0), (2, 0))), 'at least one constant piece'),
    (dict(breaks=(), pieces=()), 'allows 1 to 3 pieces'),
])
def test_phi_validation_names_the_broken_rule(kwargs, message):
  with pytest.raises(ValueError, match=message):
    Phi(**kwargs)


def test_phi_half_open_intervals():
  # Lemma 7's phi: -t - 100 outside [0, 1), 0 inside; [0, 1) is half-open.
  phi = Phi((0.0, 1.0), ((-1.0, -100.0), (0.0, 0.0), (-1.0, -100.0)))
  np.testing.assert_array_equal(phi(np.array([-0.5, 0.0, 0.999, 1.0, 2.0])),
                                [-99.5, 0.0, 0.0, -101.0, -102.0])
  # Closed right end: [1, 3] maps to 0.
  bump = PHIS['bump_closed_interval']
  np.testing.assert_array_equal(bump(np.array([0.9, 1.0, 3.0, 3.1])), [1, 0, 0, 1])


def test_phi_arrays_match_python_evaluation():
  t = np.linspace(-3, 4, 1401)
  t = np.concatenate([t, [b for p in PHIS.values() for b in p.breaks]])
  import jax
  with jax.enable_x64(True):
    import jax.numpy as jnp
    arrays = activations.phi_arrays(list(PHIS.values()), dtype=jnp.float64)
    got = np.asarray(activations.apply_phi_arrays(
        arrays, jnp.asarray(np.repeat(t[:, None], len(PHIS), 1))))
  want = np.stack([p(t) for p in PHIS.values()], axis=1)
  np.testing.assert_array_equal(got, want)


def _outside_windows(phi, epsilon, t):
  keep = np.ones_like(t, dtype=bool)
  for lo, hi in activations.ramp_windows(phi, epsilon):
    keep &= ~((t > lo) & (t < hi))
  return t[keep]


@pytest.mark.parametrize('name', sorted(PHIS))
@pytest.mark.parametrize('epsilon', [0.1, 1e-3])
def test_four_relus_equal_phi_outside_windows(name, epsilon):
  phi = PHIS[name]
  expansion = activations.relu_expansion(phi, epsilon)
  assert len(expansion.kappa) == activations.RELUS_PER_PHI
  t = np.concatenate([np.linspace(-5, 5, 20001), np.array(phi.breaks)])
  for lo, hi in activations.ramp_windows(phi, epsilon):
    t = np.concatenate([t, [lo, hi]])  # window ends themselves must match
  t = _outside_windows(phi, epsilon, t)
  np.testing.assert_allclose(expansion(t), phi(t), rtol=0, atol=1e-9)


@pytest.mark.parametrize('name', sorted(PHIS))
def test_four_relu_error_inside_windows_shrinks_with_epsilon(name):
  phi = PHIS[name]
  if not phi.breaks:
    pytest.skip('no breakpoint, no window')
  errors = []
  for epsilon in [0.1, 0.01, 0.001]:
    t = np.linspace(-5, 5, 2_000_001)
    gap = np.abs(activations.relu_expansion(phi, epsilon)(t) - phi(t))
    errors.append(gap.mean() * 10.0)  # L1 error on [-5, 5]
  jumps = [abs(phi.pieces[i][0] * c + phi.pieces[i][1]
                - phi.pieces[i + 1][0] * c - phi.pieces[i + 1][1])
           for i, c in enumerate(phi.breaks)]
  if max(jumps) == 0:  # continuous phi: the ramp is a chord of a linear piece
    assert max(errors) < 1e-12, errors
    return
  # O(epsilon): each tenfold cut in epsilon cuts the L1 error about tenfold.
  assert errors[0] > 0
  assert errors[1] < 0.2 * errors[0] and errors[2] < 0.2 * errors[1], errors


def test_relu_expansion_rejects_bad_epsilon():
  with pytest.raises(ValueError, match='positive finite'):
    activations.relu_expansion(PHIS['relu'], 0.0)
  with pytest.raises(ValueError, match='overlap'):
    activations.relu_expansion(PHIS['constant_first'], 1.5)


def test_constant_piece_placement():
  assert PHIS['constant_first'].constant_piece() == 0
  assert PHIS['constant_middle'].constant_piece() == 1
  assert PHIS['constant_last'].constant_piece() == 2
