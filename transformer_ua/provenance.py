"""Where a number came from: command, git revision, machine. Every result file carries it."""

from __future__ import annotations

import datetime
import os
import platform
import re
import shlex
import subprocess
import sys


def _git(*args: str) -> str:
  try:
    return subprocess.run(['git', *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=10, check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return 'unknown'


#: The checkout this module runs from: absolute paths under it are recorded relative.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What stands for the directories of an absolute path outside the checkout.
OUTSIDE = '<outside_checkout>'
# An absolute path in a command line: '/' at the start, after a space, '=', a quote or ','.
_ABSOLUTE = re.compile(r"""(?:(?<=^)|(?<=[\s='",]))/[^\s'",]+""")


def portable(text: str, root: str = ROOT) -> str:
  """``text`` (a command line, a path) with its absolute paths made machine-independent:
  a path under ``root`` (the checkout) becomes relative to it, and any other keeps only
  its last component, under ``OUTSIDE`` (a record names the project, not a machine's
  directory layout). Everything else is left as it is."""
  root = os.path.normpath(root)

  def one(m):
    path = os.path.normpath(m.group(0))
    if path == root or path.startswith(root + os.sep):
      return os.path.relpath(path, root)
    return f'{OUTSIDE}/{os.path.basename(path)}' if os.path.basename(path) else OUTSIDE

  return _ABSOLUTE.sub(one, text)


def machine() -> str:
  """One line: CPU model, core count, memory, and JAX devices."""
  cpu = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo') as f:
      names = [l.split(':', 1)[1].strip() for l in f if l.startswith('model name')]
    if names:
      cpu = names[0]
  except OSError:
    pass
  mem = ''
  try:
    with open('/proc/meminfo') as f:
      kb = int(next(l for l in f if l.startswith('MemTotal')).split()[1])
    mem = f', {kb / 2**20:.0f} GiB RAM'
  except (OSError, StopIteration, ValueError):
    pass
  try:
    import jax
    devices = jax.devices()
    dev = f', JAX {jax.__version__} on {len(devices)}x {devices[0].device_kind}'
  except Exception:  # pylint: disable=broad-except
    dev = ''
  return f'{cpu}, {os.cpu_count()} cores{mem}{dev}'


def load_1min() -> float:
  """The 1-minute load average, to 2 decimals (nan where the OS does not give one)."""
  try:
    return round(os.getloadavg()[0], 2)
  except OSError:
    return float('nan')


def loadavg_text() -> str:
  """/proc/loadavg as one line (1, 5 and 15-minute loads, runnable/total, last pid), or
  the 1-minute load where that file does not exist."""
  try:
    with open('/proc/loadavg') as fh:
      return fh.read().strip()
  except OSError:
    return str(load_1min())


def record(command: str | None = None) -> dict:
  """Provenance dict: command (``portable``), git revision (+dirty flag), machine, UTC
  time, load."""
  rev = _git('rev-parse', 'HEAD')
  dirty = bool(_git('status', '--porcelain', '--untracked-files=no'))
  if command is None:
    command = 'python ' + ' '.join(shlex.quote(a) for a in sys.argv)
  command = portable(command)
  load = load_1min()
  return {
      'command': command,
      'git_revision': rev + ('-dirty' if dirty and rev != 'unknown' else ''),
      'machine': machine(),
      'load_average_1min_at_start': load,
      'utc_time': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
      'python': platform.python_version(),
  }


def markdown_header(prov: dict, what: str = 'command') -> str:
  """A few Markdown lines stating the provenance, for results/*.md files; ``what`` names
  the command (e.g. 'report command' for a report built from runs that carry their own)."""
  return (f"- {what}: `{prov['command']}`\n- git revision: `{prov['git_revision']}`\n"
          f"- machine: {prov['machine']} (1-min load {prov['load_average_1min_at_start']})\n"
          f"- time (UTC): {prov['utc_time']}\n")


#: The log every benchmark appends its result line to, inside its --output_dir.
BENCHMARK_LOG = 'benchmarks.md'
BENCHMARKS_HEADER = '# Benchmarks\n\nOne line per run, appended by the benchmark scripts.\n\n'


def benchmark_line(summary: str, prov: dict) -> str:
  """One results/benchmarks/benchmarks.md line: the summary, then command, revision, machine."""
  return (f"- {summary} — `{prov['command']}`, rev `{prov['git_revision']}`, "
          f"{prov['machine']}, 1-min load {prov['load_average_1min_at_start']}, "
          f"{prov['utc_time']}\n")


def append_benchmark_line(path: str, summary: str, prov: dict) -> str:
  """Appends ``benchmark_line(summary, prov)`` to ``path`` (header first if new)."""
  line = benchmark_line(summary, prov)
  if path:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    new = not os.path.exists(path)
    with open(path, 'a') as f:
      if new:
        f.write(BENCHMARKS_HEADER)
      f.write(line)
  return line
