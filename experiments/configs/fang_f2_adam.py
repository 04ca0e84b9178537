r"""DEVIATION FROM THE PAPER: Fang et al. 2022, Section 5, target f2, trained with Adam.

Section 5 says SGD with a one-cycle learning rate (1e-4 -> 1e-3); our ATTENTION runs
with it are in results/fang/fang_regression.md; the float64 least-squares
optimum of the same model on the same data is in results/fang/fang_optimum_f2.json
(experiments/fang_optimum.py). This config changes ONE thing, the optimizer:
optax.adam (b1 0.9, b2 0.999, eps 1e-8) under the same one-cycle learning-rate
schedule, the same clipping, batch, epochs, data and initialization (Adam has no
momentum cycle: momentum_min / momentum_max are unused). Everything else is fang_f2.

Command (its own workdir, so it never mixes with the paper's runs; resumable):

    nice -n 10 python experiments/fang_regression.py \
        --config=experiments/configs/fang_f2_adam.py --config.seeds='(0,)' \
        --workdir=runs/fang_adam --output_dir=runs/fang_adam/report \
        --only=attention:n_q --progress=false --config.train_epoch=scan --config.grad_chunk=250

--output_dir keeps the report of these runs out of results/ (the paper's report).
"""

import os
import runpy

# The paper's f2 config, loaded by path so this file works however it is loaded
# (absl's --config=path loads a config as a file, not as a package module).
fang_f2_get_config = runpy.run_path(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fang_f2.py'))['get_config']


def get_config():
  c = fang_f2_get_config()
  c.optimizer = 'adam'       # DEVIATION: Section 5 uses SGD
  c.sweep = ('attention:n_q', 'attention:4368')
  return c
