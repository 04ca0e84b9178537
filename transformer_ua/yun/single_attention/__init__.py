"""One softmax attention layer as the contextual mapping: its ids, realizations (deep and
wide), Theorem 3."""
