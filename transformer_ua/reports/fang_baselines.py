"""Fang et al. 2022, Section 5 against tuned baselines: the record, its tables and figures.

``write(bconfig, workdir, output_dir, prov)`` collects the runs under ``workdir``
(``train.fang_baselines.collect``) and writes, each file atomically, in ``output_dir``:

    fang_baselines.json               the record (per target and model: paper.*, tuned.*)
    fang_baselines.md                 Table 1 side by side with the paper, the grids,
                                      the f1 gap study, provenance; then
                                      fang_baselines_notes.md verbatim if present
    fang_baselines_table1.png         test MSE per model: paper / paper recipe / tuned
    fang_baselines_f1_slices.png      Figure 2 analogue: f1 and the trained models on
                                      the line x2 = 0
    fang_baselines_curves.png         Figure 3 analogue: MSE_Tr and MSE_Te vs epoch
    fang_baselines_generalization.png MSE_Tr vs MSE_Te per model and recipe
    fang_baselines_f1_gap.png         the gap study: test MSE and |theta_T - theta_0|

Statistics over seeds: mean, sample std (ddof 1), min and max; ratios of a model's
mean test MSE to ATTENTION's come with the range [min / max, max / min] over seeds.
Parts: ``fang_baselines_tables`` (statistics, summary, the markdown) and
``fang_baselines_figures`` (the PNGs); ``write`` here builds the record from them.
"""

from __future__ import annotations

import json
import os

from transformer_ua import outputs
from transformer_ua.fang import regression
from transformer_ua.reports.fang_baselines_figures import (
    FIGURES, clip_bound, curves_figure, gap_figure, generalization_figure, slices_figure,
    table1_figure)
from transformer_ua.reports.fang_baselines_tables import _finite, render, summarize
from transformer_ua.train import fang_baselines as baselines


def write(bconfig, workdir, output_dir, prov) -> dict:
  """Collects the runs and writes the record, the Markdown and the figures."""
  record = {'report_provenance': prov, 'targets': list(bconfig.targets),
            **baselines.collect(bconfig, workdir)}
  summary = summarize(record)
  record['summary'] = summary
  for target in record['targets']:          # the brief's names: tuned.grid / selected / ...
    for v in record[target]['models'].values():
      v['epochs'] = record[target]['epochs']
  for target in record['targets']:   # the longest path clipped SGD can travel (section 1)
    record[target]['clip1_path_bound_paper_recipe'] = clip_bound(
        bconfig[target].train, regression.DATA[target]['num_train'])
  outputs.atomic_write(os.path.join(output_dir, 'fang_baselines.json'),
                       json.dumps(_finite(record), indent=1))
  table1_figure(record, os.path.join(output_dir, FIGURES[0]))
  slices_figure(record, bconfig, workdir, os.path.join(output_dir, FIGURES[1]))
  curves_figure(record, bconfig, workdir, os.path.join(output_dir, FIGURES[2]))
  generalization_figure(record, os.path.join(output_dir, FIGURES[3]))
  if 'f1' in record['targets']:
    gap_figure(record, os.path.join(output_dir, FIGURES[4]),
               record['f1']['clip1_path_bound_paper_recipe'])
  outputs.atomic_write(os.path.join(output_dir, 'fang_baselines.md'),
                       render(record, summary, output_dir))
  return record
