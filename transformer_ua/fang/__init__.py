"""Fang et al. 2022, *Attention enables zero approximation error*, as programs.

Pipeline (one module per step of the proof):

* ``tokens``          Section 2.1: the input map F(x), tokens z_i = [t_i, e_i, 0_q, 1].
* ``multiply_block``  Lemma 3.1: a fixed single-head one-hot-maximum block writes
                      -x_i y_i into an empty slot (2n + 8 non-zeros); the choice of M.
* ``ridge``           Lemma 3.3: ridge directions and beta_{k,s} for any Q, deg <= q.
* ``polynomial``      Theorem 3.5: C^q(x) = beta . concat(T^q(x)) + b = Q(x) on
                      ||x|| <= B; literal network, compact equivalent, counts.
* ``exact``           exact rational evaluation (Fractions; int64 through the JAX net).
* ``float_bound``     Theorem 3.5 as it runs: certified sup_{||x|| <= B} |fl(C^q(x)) - Q(x)|
                      in float64 / float32, any summation order, FMA or not.
* ``corollary37``     Corollary 3.7: polynomial fits of continuous functions, compiled.
* ``regression``      Section 5: data, ATTENTION / NN_width / NN_depth, training loop.

Public API::

    from transformer_ua import fang
    model = fang.build_polynomial_transformer({(2, 0): 1.0, (0, 2): 1.0}, d=2, bound=50.0)
    model.apply(x)          # literal network, float64, x: [batch, d]
    model.apply_compact(x)  # ridge features and powers, float64
    model.apply_exact(rows, path='literal' | 'compact' | 'integer')  # Fractions
    model.depth(), model.num_params(), model.num_free_params(), model.num_nonzeros()
"""

from transformer_ua.fang.multiply_block import (choose_m_squared, multiplication_block,
                                                paper_nonzeros, theorem_blocks)
from transformer_ua.fang.polynomial import (PolynomialTransformer,
                                            build_polynomial_transformer, from_params)
from transformer_ua.fang.ridge import (evaluate_poly, evaluate_poly_exact, n_q,
                                       ridge_coefficients, ridge_directions, validate_poly)
from transformer_ua.fang.tokens import Layout, input_map

__all__ = [
    'Layout', 'PolynomialTransformer', 'build_polynomial_transformer', 'choose_m_squared',
    'evaluate_poly', 'evaluate_poly_exact', 'from_params', 'input_map',
    'multiplication_block', 'n_q', 'paper_nonzeros', 'ridge_coefficients',
    'ridge_directions', 'theorem_blocks', 'validate_poly',
]
