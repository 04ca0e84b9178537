"""The certificate of d_p(f, g) and its terms: the f-term, the targets' moduli, the
decomposition, distances."""
