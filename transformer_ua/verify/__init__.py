"""Exact verification of the constructions on whole grids.

* ``grids``               -- grid points decoded on device, exact counts, categories.
* ``contextual_mapping``  -- Lemma 8 / 10 (+ Lemma 9 end to end) on every grid point.
* ``quantization``        -- Lemma 7 on real and exact rational inputs.
* ``value_mapping``       -- literal Lemma 9 network vs its compact equivalent.
* ``theorem2``            -- all of the above in one call (the experiment's engine).
"""
