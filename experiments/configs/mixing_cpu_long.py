"""`cpu_long`: the `cpu` budget with 3x the pre-training steps, to find the plateau.

The `cpu` learning curves were still rising over the last quarter of their 2000-step
schedule (results/mixing/mixing_layers.md), so the `cpu` record is "end of schedule",
not "plateau". This config changes one number:

    pretrain.num_steps: 2000 -> 6000     (6.1M -> 18.4M token positions per run)

Model, data, vocabulary, batch, peak learning rate and warm-up are those of `cpu`, so
the two schedules differ only in how long the learning rate takes to decay to 0. One
seed per mixer (seed 0, the same batches as the `cpu` seed 0 for the first 2000 steps).
Comparing the two schedules per mixer says how much 3x the tokens buys and whether the
`cpu` ordering of the mixers survives it:

    bash experiments/mixing_cpu_sweep.sh runs/mixing_cpu_long long    # the runs
    python experiments/mixing_sweep.py --config=experiments/configs/mixing_cpu_long.py \
        --workdir=runs/mixing_cpu_long --seeds=1 --hybrid_ks= --report_only \
        --compare_to=runs/mixing_cpu --output_dir=results/mixing --overwrite  # plateau
"""

import os
import runpy

# The `cpu` config, loaded by path so this file works however it is loaded (absl's
# --config=path loads a config as a file, not as a package module).
cpu_get_config = runpy.run_path(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), 'mixing_cpu.py'))['get_config']


def get_config():
  c = cpu_get_config()
  c.pretrain.num_steps = 6000   # 3x `cpu`; everything else as `cpu`
  return c
