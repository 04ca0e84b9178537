"""`cpu_longest`: the `cpu` budget with 27x the pre-training steps, the next plateau test.

At 9x the `cpu` steps (experiments/configs/mixing_cpu_longer.py, 18000 steps) no mixer
had plateaued (results/mixing/mixing_layers_plateau.md). This config triples the steps
once more:

    pretrain.num_steps: 2000 -> 54000     (6.1M -> 166M token positions per run,
                                           ~33 passes over the 105,947 training synsets)

Everything else is `cpu`, as for `cpu_longer`: only the linear decay of the learning rate
to 0 is 27x slower. One seed per mixer. A run takes hours on 2 cores, so expect to
stop and resume it: it checkpoints every 5 min and on SIGTERM, and resumes
on the machine that holds its workdir (checkpoints are not archived).

    bash experiments/mixing_cpu_sweep.sh runs/mixing_cpu_longest longest   # the runs
    python experiments/mixing_sweep.py --config=experiments/configs/mixing_cpu_longest.py \
        --workdir=runs/mixing_cpu_longest --seeds=1 --hybrid_ks= --report_only \
        --compare_to=results/mixing/mixing_layers_plateau.json --output_dir=results/mixing \
        --overwrite
"""

import os
import runpy

# The `cpu` config, loaded by path (absl's --config=path loads a config as a file).
cpu_get_config = runpy.run_path(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), 'mixing_cpu.py'))['get_config']


def get_config():
  c = cpu_get_config()
  c.pretrain.num_steps = 54000   # 27x `cpu`; everything else as `cpu`
  return c
