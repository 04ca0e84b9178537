"""What a run leaves behind: no empty directories after a refusal, and progress that reads
as lines in a log file (``cli.output_dir`` + ``cli.fail``; ``outputs.progress``)."""

import io
import time

import pytest

from transformer_ua import cli, outputs


@pytest.fixture(autouse=True)
def _no_dirs_from_other_tests():
  cli._CREATED_DIRS.clear()  # pylint: disable=protected-access
  yield
  cli._CREATED_DIRS.clear()  # pylint: disable=protected-access


def test_a_refusal_removes_the_empty_directories_output_dir_made(tmp_path, capsys):
  out = tmp_path / 'a' / 'b' / 'c'
  cli.output_dir(str(out), '--output_dir')
  assert out.is_dir()
  with pytest.raises(SystemExit) as e:
    cli.fail('config.n=40 is too large')
  assert e.value.code == cli.USAGE_ERROR
  assert not (tmp_path / 'a').exists() and tmp_path.exists()
  assert capsys.readouterr().err.startswith('error: config.n=40 is too large')


def test_a_refusal_keeps_what_existed_and_what_holds_files(tmp_path):
  (tmp_path / 'kept').mkdir()
  cli.output_dir(str(tmp_path / 'kept' / 'new'), '--output_dir')
  cli.output_dir(str(tmp_path / 'full'), '--output_dir')
  (tmp_path / 'full' / 'result.json').write_text('{}')
  with pytest.raises(SystemExit):
    cli.fail('refused')
  assert (tmp_path / 'kept').is_dir() and not (tmp_path / 'kept' / 'new').exists()
  assert (tmp_path / 'full' / 'result.json').exists()


class _Terminal(io.StringIO):
  def isatty(self):
    return True


def test_progress_on_a_terminal_redraws_one_line():
  stream = _Terminal()
  for _ in outputs.progress(range(5), file=stream, desc='work', mininterval=0):
    pass
  assert '\r' in stream.getvalue()


def test_progress_into_a_file_writes_whole_lines_at_intervals(monkeypatch):
  monkeypatch.setattr(outputs, 'PLAIN_PROGRESS_SECONDS', 0.05)
  stream = io.StringIO()
  for _ in outputs.progress(range(40), file=stream, desc='work'):
    time.sleep(0.005)
  text = stream.getvalue()
  lines = text.splitlines()
  assert '\r' not in text and text.endswith('\n')
  assert all(line.startswith('work:') for line in lines)
  # One line per interval (~0.2 s / 0.05 s), not one per update, and the last says 40/40.
  assert 2 <= len(lines) < 40 and '40/40' in lines[-1]


def test_progress_into_a_file_defaults_to_the_slow_interval():
  stream = io.StringIO()
  for _ in outputs.progress(range(1000), file=stream, desc='fast'):
    pass
  lines = stream.getvalue().splitlines()
  assert len(lines) <= 3 and '1000/1000' in lines[-1]   # start, (maybe one), the end
