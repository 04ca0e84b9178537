"""The figures of the Appendix H sweep report (``reports.mixing_sweep``): the Table 1 and
Figure 1 analogues (``<stem>_table1.png``, ``<stem>_figure1.png``) and the pre-training
learning curves (``<stem>_curves.png``)."""

from __future__ import annotations

import numpy as np

from transformer_ua.reports.mixing_rows import NAMES, TABLE_MODELS


def _curve_band(per_seed):
  """Every evaluated step; mean and sample std of the accuracy over the seeds that reached
  it (std 0 where only one did), so an unfinished seed does not cut the others short."""
  steps = sorted(set().union(*(set(s for s, _ in pts) for pts in per_seed.values())))
  at = [[dict(pts)[s] for pts in per_seed.values() if s in dict(pts)] for s in steps]
  mean = np.array([np.mean(v) for v in at])
  std = np.array([np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in at])
  return np.array(steps), mean, std


def _plot_curves(curves, tokens_per_step, path, L, num_steps):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7.5, 4.2))
  for key in [(m, 0) for m in TABLE_MODELS] + [('attention', k) for k in range(1, L)]:
    if key not in curves:
      continue
    steps, mean, std = _curve_band(curves[key])
    if not len(steps):
      continue
    x = steps * tokens_per_step / 1e6
    n = len(curves[key])
    running = sum(max(s for s, _ in pts) < num_steps for pts in curves[key].values())
    label = ((NAMES[key[0]] if key[1] == 0 else f'hybrid k={key[1]}') + f' (n={n}'
             + (f', {running} unfinished' if running else '') + ')')
    line, = ax.plot(x, mean, ls='-' if key[1] == 0 else '--', label=label)
    ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
  ax.set_xlabel('training token positions (M) = step x batch x max_len')
  ax.set_ylabel('held-out masked-LM accuracy (%)')
  ax.set_title('Pre-training learning curves (mean ± std over seeds)')
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _plots(table, figure, L, stem, baselines=None):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
  for ax, (key, label) in zip(axes, [('mlm_accuracy', 'held-out masked-LM accuracy (%)'),
                                     ('mnli_accuracy', 'MNLI-analogue accuracy (%)'),
                                     ('squad_em', 'SQuAD-analogue EM (%)'),
                                     ('squad_f1', 'SQuAD-analogue F1 (%)')]):
    ks = [k for k in range(L + 1) if figure[k][key]]
    if ks:
      ax.errorbar(ks, [figure[k][key]['mean'] for k in ks],
                  yerr=[figure[k][key]['std'] for k in ks], marker='o', capsize=3)
    base = None
    if baselines and key == 'mnli_accuracy' and 'mnli' in baselines:
      base = ('majority class', baselines['mnli']['majority_baseline_accuracy'])
    elif baselines and key.startswith('squad') and 'squad' in baselines:
      name, b = max(baselines['squad']['baselines'].items(), key=lambda kv: kv[1]['em'])
      base = (name.replace('_', ' '), b[key.split('_')[1]])
    if base:
      ax.axhline(base[1], color='gray', ls='--', label=f'baseline: {base[0]}')
      ax.legend(fontsize=8)
    ax.set_xlabel('k = lower layers replaced by SepConv')
    ax.set_ylabel(label)
    ax.set_xticks(range(L + 1))
    ax.grid(alpha=0.3)
  fig.suptitle('Figure 1 analogue (mean ± std over seeds)')
  fig.tight_layout()
  fig.savefig(stem + '_figure1.png', dpi=110)
  plt.close(fig)
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
  for ax, (key, label) in zip(axes, [('mlm_accuracy', 'masked-LM accuracy (%)'),
                                     ('mnli_accuracy', 'MNLI-analogue accuracy (%)')]):
    ms = [m for m in TABLE_MODELS if table[m][key]]
    ax.bar(range(len(ms)), [table[m][key]['mean'] for m in ms],
           yerr=[table[m][key]['std'] for m in ms], capsize=3)
    ax.set_xticks(range(len(ms)))
    ax.set_xticklabels([NAMES[m] for m in ms], rotation=15)
    ax.set_ylabel(label)
    if key == 'mnli_accuracy' and baselines and 'mnli' in baselines:
      ax.axhline(baselines['mnli']['majority_baseline_accuracy'], color='gray', ls='--',
                 label='majority class')
      ax.legend(fontsize=8, loc='lower right')
  fig.suptitle('Table 1 analogue (mean ± std over seeds)')
  fig.tight_layout()
  fig.savefig(stem + '_table1.png', dpi=110)
  plt.close(fig)
