"""Studies: ladders, sweeps and fits over the constructions, callable from binaries and
notebooks alike (``size_law``: the certified size-vs-epsilon law; ``approximation``: the
main job; ``certification``: Theorems 2 and 3 certified, each bound against a Monte Carlo)."""
