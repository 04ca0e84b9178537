r"""Certificates for ANY standard Transformer: d_p(f, fl(g)) over the whole cube, proved.

Given a target f and a standard Transformer g (``network_dict``: softmax attention with
biases, scale and causal mask, ReLU or GELU feed-forward, residuals, LayerNorm post or pre,
optional embedding, positional encoding and readout; read from a torch module, a Flax pair
or an ONNX file by ``transformer_ua.networks``), and an
arithmetic (``rounding.MATMUL_MODELS``: float64, float32, TF32, bfloat16, the A100 / H100 TF32
hardware models, or exact), the
certifier proves

    d_p(f, fl(g))^p = int_[0,1]^{n x d} sum_jk |f(X)_jk - fl(g)(X)_jk|^p dX
                   <= sum_B vol(B) sum_jk E_B,jk^p,         E_B,jk >= sup_B |f - fl(g)|_jk

over a partition of the cube into boxes B (p = inf: max_B max_jk E_B,jk), where

    E_B,jk = min( |e(c)| + sum_q max|J_e(B)_jk,q| r_q ,  sup |f(B) - g(B)| )   (exact g)
             + D_B,jk                                             (float deviation of g)

with c the box's centre, r its half-widths, e = f - g, J_e(B) = J_f(B) - J_g(B) an interval
Jacobian (the mean-value form: its width shrinks like r^2, a plain interval like r), and
D_B >= sup_B |fl(g) - g| from the rounding model propagated layer by layer. Modules:

    intervals.py           outward-rounded interval arithmetic with tangents (forward mode)
    network_enclosure.py   g over a batch of boxes: value, Jacobian, float deviation D
    float_deviation.py     fl(g) - g op by op: the rounding terms of D, the overflow check
    target_enclosures.py   f's side: the built-ins' interval extensions
    callable_enclosures.py a callable f's side: first order (L, modulus) or second order
                           (the caller's jacobian and H: J_e = J_f(c) - J_g(B))
    box_bound.py           E_B >= sup_B |f - fl(g)| for a round of boxes (the Evaluator)
    box_sums.py            the boxes, their volumes, the exact L_p total, bisection
    network_certificate.py branch and bound over boxes, the certificate
    runtimes.py            what runs g's operations: NumPy, JAX, onnxruntime
    runtime_probe.py       what a runtime does, measured against what the certificate assumes
    runtime_report.py      the probe's report: faults, verdict, the certificate's line
    trainer.py, hand_built.py   networks to certify: trained ones, and a hand-built reference
    hand_built_certificate.py   the hand-built reference certified at (d, n), sampled beside it

Networks come in and go out through ``transformer_ua.networks`` (the dict, flat ONNX, save
and load); the targets f are ``transformer_ua.targets``, shared with Yun's construction.

The public face, all a caller needs:

    certify_network(f, g, d=, n=, p=, arithmetic=)  -> NetworkCertificate:
                                     d_p(f, fl(g)) <= total over the whole cube, proved
    train_and_certify(f, epsilon, d=, n=)           -> TrainedCertificate: the smallest
                                     trained network whose certificate reaches epsilon
    check_runtime(runtime, arithmetic=)             -> what a runtime does (exp, softmax,
                                     matmul) against what the float certificates assume
    save(result, path) / load(path) / recheck(saved, f=None)
                                  -> a certified network (any of the above, or what
                                     ``yun.approximate`` returns) with its certificate in
                                     one file, hashes checked on load
"""

import importlib

#: Where each public name lives, imported on first use (the package loads nothing heavy).
_HOMES = {'certify_network': 'certify.network_certificate',
          'NetworkCertificate': 'certify.network_certificate',
          'check_runtime': 'certify.runtime_probe',
          'train_and_certify': 'certify.trainer', 'TrainedCertificate': 'certify.trainer',
          'save': 'networks.saved_network', 'load': 'networks.saved_network',
          'recheck': 'networks.saved_network'}

__all__ = list(_HOMES)


def __getattr__(name: str):
  if name not in _HOMES:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  return getattr(importlib.import_module(f'transformer_ua.{_HOMES[name]}'), name)
