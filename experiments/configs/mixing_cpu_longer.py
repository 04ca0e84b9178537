"""`cpu_longer`: the `cpu` budget with 9x the pre-training steps, to reach the plateau.

At 3x the `cpu` steps (experiments/configs/mixing_cpu_long.py, 6000 steps) BProj,
SepConv and the Transformer were still gaining held-out masked-LM accuracy
(results/mixing/mixing_layers_plateau.md). This config triples the steps once more:

    pretrain.num_steps: 2000 -> 18000     (6.1M -> 55.3M token positions per run,
                                           ~11 passes over the 105,947 training synsets)

Everything else is `cpu`: model, data, vocabulary, batch, peak learning rate, warm-up;
only the linear decay of the learning rate to 0 is 9x slower. One seed per mixer
(seed 0: the same batches as `cpu` and `cpu_long` seed 0 for their first steps). A mixer
counts as plateaued when this last tripling of the tokens buys less than
mixing_sweep.PLATEAU_POINTS of held-out accuracy:

    bash experiments/mixing_cpu_sweep.sh runs/mixing_cpu_longer longer   # the runs
    python experiments/mixing_sweep.py --config=experiments/configs/mixing_cpu_longer.py \
        --workdir=runs/mixing_cpu_longer --seeds=1 --hybrid_ks= --report_only \
        --compare_to=runs/mixing_cpu,runs/mixing_cpu_long --output_dir=results/mixing \
        --overwrite
"""

import os
import runpy

# The `cpu` config, loaded by path (absl's --config=path loads a config as a file).
cpu_get_config = runpy.run_path(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), 'mixing_cpu.py'))['get_config']


def get_config():
  c = cpu_get_config()
  c.pretrain.num_steps = 18000   # 9x `cpu`; everything else as `cpu`
  return c
