r"""Certificates for ANY standard Transformer: d_p(f, fl(g)) over the whole cube, proved.

Given a target f and a network g of Yun et al.'s class (``network_dict``: softmax attention,
ReLU feed-forward, residuals, optional embedding, positional encoding and readout), and an
arithmetic (``rounding.MATMUL_MODELS``: float64, float32, TF32, bfloat16, or exact), the
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
    target_enclosures.py   f's side: the built-ins' interval extensions, a callable's modulus
    network_certificate.py branch and bound over boxes, the L_p sum, the certificate
    runtime_probe.py       what a runtime does, measured against what the certificate assumes
    trainer.py, hand_built.py   networks to certify: trained ones, and a hand-built reference
"""
