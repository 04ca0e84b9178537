"""transformer_ua: the constructions of Yun et al. (2020) and Fang et al. (2022).

Subpackages follow the proofs' pipelines:

* ``transformer_ua.layers``      -- the paper-faithful layers (eqs. (1)-(4)).
* ``transformer_ua.activations`` -- the activation class Phi and Lemma 6's 4 ReLUs.
* ``transformer_ua.realize``     -- Lemma 6 on params: hardmax->softmax, Phi->ReLU.
* ``transformer_ua.yun``         -- Yun et al.: quantization, contextual mapping,
  value mapping, approximation of target functions.
* ``transformer_ua.fang``        -- Fang et al.: multiplication blocks, exact polynomials.
"""

__version__ = '0.1.0'
