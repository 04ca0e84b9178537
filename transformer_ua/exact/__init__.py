"""Exact integer arithmetic for the constructions: bit planning, limbs, kernels, reference.

Every grid-side quantity of Yun et al.'s Theorem 2 network is a rational with
denominator dividing ``2N`` (``N = 1/delta``). Multiplying every grid-side value by a
scale ``S`` (a multiple of ``2N``; default ``S = 2N``) makes all of them integers, and
the layers can then be run in integer arithmetic with *no* rounding anywhere:

* ``int64``  -- the core's exact integer mode (``layers.attention_update`` etc. on
  int64 arrays under ``jax.enable_x64``), when the planner proves that every
  intermediate value fits with a bit of margin;
* ``limbs``  -- multi-word integers in JAX, when it does not.

Modules, one idea each:

    planner      proven bound -> Arithmetic (int64 | K limbs of w bits), or refusal
    limbs        limb numbers and digit constants: +, -, *, compare, floor division
    limb_layers  hardmax attention / Phi feed-forward on limbs, scanned over segments
    int64        the shared-projection (W_Q = W_K = W_V) attention kernel in int64
    ops          ExactOps: one interface over int64 values and limb numbers
    reference    the NumPy reference layers (int64, Python ints, Fractions)
    ball         arb ball evaluation of realized (softmax/ReLU) networks: certified
                 enclosures of the exact real output
"""
