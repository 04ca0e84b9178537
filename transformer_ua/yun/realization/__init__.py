"""Lemma 6 at scale: g_bar's exact rationals, the planning of lam / epsilon / bits, ids
through the realization, certified evaluation."""
