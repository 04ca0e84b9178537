"""The target functions f, shared by Yun's construction and the certifier of any network.

    functions.py        the built-in targets, a caller's callable checked, Lemma 4's f_bar
    callable_checks.py  what a caller states about f (L, a modulus), refuted on samples
    bounds.py           the targets' Lipschitz constants, polynomial forms, arb extensions
    distances.py        d_p between functions, sampled with confidence intervals
"""
