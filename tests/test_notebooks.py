"""Every notebook in colabs/ runs headless without error, saves its figures as PNGs,
and is stored without outputs.

Each notebook is executed with nbclient in a fresh kernel (cwd colabs/). The kernel
inherits ``TUA_FIGURE_DIR`` and ``TUA_WORKDIR`` (temporary directories, so the suite
leaves the committed figures in colabs/figures/<notebook stem> as they are; a notebook
run by hand writes there), and
``PIP_NO_INDEX=1`` so the install cell cannot reach the network: it must find the
package of this checkout. Every notebook runs on its own small defaults; a cell error
(including a failed ``assert`` in a notebook's checks) fails the test. The two longest
notebooks (``SLOW``) run only with ``--runslow``:

    python -m pytest -q tests/test_notebooks.py --runslow -s    # prints each run's seconds
"""

import glob
import os
import time

import nbformat
import pytest

COLABS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'colabs')
NOTEBOOKS = sorted(glob.glob(os.path.join(COLABS, '*.ipynb')))
FIGURES = os.path.join(COLABS, 'figures')
EXPECTED = ('01_contextual_mapping', '02_target_to_transformer', '03_positional_encodings',
            '04_fang_exact_polynomials', '05_mixing_layers', '06_certify_any_network',
            '07_certify_a_torch_network')
#: Notebooks whose run exceeds ~1 minute on 2 shared cores (training, realization
#: sweeps): executed only with --runslow. The others run in CI.
SLOW = ('02_target_to_transformer', '05_mixing_layers')
#: Per-cell execution limit (seconds) on 2 shared CPU cores.
CELL_TIMEOUT = 900
#: Notebooks stored larger than this carry outputs or data.
MAX_BYTES = 100_000


def _name(path):
  return os.path.splitext(os.path.basename(path))[0]


def test_every_notebook_is_present():
  assert sorted(_name(p) for p in NOTEBOOKS) == sorted(EXPECTED)


@pytest.mark.parametrize('path', NOTEBOOKS, ids=_name)
def test_notebook_is_stored_without_outputs(path):
  nb = nbformat.read(path, as_version=4)
  nbformat.validate(nb)
  for i, cell in enumerate(nb.cells):
    if cell.cell_type == 'code':
      assert not cell.get('outputs'), f'{_name(path)} cell {i} has stored outputs'
      assert cell.get('execution_count') is None, f'{_name(path)} cell {i} has a count'
  assert os.path.getsize(path) < MAX_BYTES, 'notebook file too large (outputs or data?)'


@pytest.mark.parametrize('path', NOTEBOOKS, ids=_name)
def test_first_cell_installs_the_package(path):
  nb = nbformat.read(path, as_version=4)
  first = next(c for c in nb.cells if c.cell_type == 'code').source
  for needle in ('TRANSFORMER_UA_REPO', 'pip', 'find_spec', 'TUA_FIGURE_DIR'):
    assert needle in first, f'{_name(path)}: first code cell lacks {needle!r}'


def test_a_failing_cell_fails_the_run(tmp_path):
  from nbclient import NotebookClient
  from nbclient.exceptions import CellExecutionError
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('assert 1 + 1 == 3')])
  with pytest.raises(CellExecutionError):
    NotebookClient(nb, timeout=300, startup_timeout=300, kernel_name='python3',
                   resources={'metadata': {'path': str(tmp_path)}}).execute()


@pytest.mark.parametrize('path', [
    pytest.param(p, marks=pytest.mark.slow) if _name(p) in SLOW else p for p in NOTEBOOKS],
    ids=_name)
def test_notebook_executes_and_saves_figures(path, tmp_path):
  from nbclient import NotebookClient
  nb = nbformat.read(path, as_version=4)
  out_dir = str(tmp_path / 'figures')
  os.makedirs(out_dir)
  env = {'TUA_FIGURE_DIR': out_dir, 'TUA_WORKDIR': str(tmp_path), 'PIP_NO_INDEX': '1'}
  env_before = {k: os.environ.get(k) for k in env}
  os.environ.update(env)
  t0 = time.time()
  try:
    NotebookClient(nb, timeout=CELL_TIMEOUT, startup_timeout=300, kernel_name='python3',
                   resources={'metadata': {'path': COLABS}}).execute()
  finally:
    for k, v in env_before.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
  print(f'{_name(path)}: {time.time() - t0:.1f} s')
  pngs = glob.glob(os.path.join(out_dir, '*.png'))
  assert pngs, f'{_name(path)} saved no figure into {out_dir}'
  assert all(os.path.getsize(p) > 2000 for p in pngs)
  committed = {os.path.basename(p) for p in glob.glob(os.path.join(FIGURES, _name(path), '*.png'))}
  assert {os.path.basename(p) for p in pngs} == committed, (
      'the notebook\'s figures differ from the committed ones in colabs/figures/')


@pytest.mark.parametrize('path', NOTEBOOKS, ids=_name)
def test_notebook_figures_default_to_its_own_folder(path):
  """Run by hand (no TUA_FIGURE_DIR), a notebook writes into colabs/figures/<its stem>,
  never flat into colabs/figures/; every committed figure sits in such a folder."""
  nb = nbformat.read(path, as_version=4)
  first = next(c for c in nb.cells if c.cell_type == 'code').source
  assert f"os.path.join(ROOT, 'colabs', 'figures', '{_name(path)}')" in first
  assert glob.glob(os.path.join(FIGURES, '*.png')) == []
