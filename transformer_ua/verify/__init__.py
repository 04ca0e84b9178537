"""Exact verification of the constructions on whole grids.

* ``entry``               -- the one entry point: ``verify(subject, enumeration=...)`` for a
  variant (``yun.variants.registry.choose``) or a built g_c; the subject's type picks its
  check (the modules below), ``verify_and_record`` is the binaries' call.
* ``checks``              -- the per-point properties (Lemma 8 / 10, ties T1-T3,
  equivariance, Lemma 9 end to end), pure jnp: a new property is one entry here.
* ``grid_pass``           -- one driver over a grid: ``Chunks`` (any g_c kernel) or
  ``Blocks`` (in-kernel blocks on column ids) as strategy; ``full_pass``.
* ``runner``              -- the resumable, logged loop (progress, ETA, state files).
* ``sweep_kernel``        -- the block strategy: layout, in-kernel decoding, block fn.
* ``contextual_mapping``  -- Lemma 8 / 10 (+ Lemma 9 end to end) on every grid point.
* ``contextual_ties``     -- the tie-complete map's T1-T3 on every grid point.
* ``floating``            -- where float64 / float32 evaluation of g_c breaks.
* ``one_layer``           -- the certified check of the one-layer contextual mapping.
* ``quantization``        -- Lemma 7 on real and exact rational inputs.
* ``value_mapping``       -- literal Lemma 9 network vs its compact equivalent.
* ``theorem2``            -- all of the above in one call (``entry``'s check of ``Paper``).

Grid points are decoded on device by ``yun.enumeration``; g_c is evaluated by a kernel of
``yun.stages.gc_kernels``.
"""
