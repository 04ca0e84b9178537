r"""A certified network in one file: save, load (with its checks) and re-check.

``save(result, path)`` writes what ``yun.approximate`` returned (an ``Approximation``) as
one NumPy ``.npz`` archive (loaded with ``allow_pickle=False``: no code runs on load):

    params/<name>      float64 arrays, the network as a ``network_dict.Net`` (``arrays()``
                       names: embed, positional, blocks.<i>.W_Q, ..., readout)
    manifest           UTF-8 JSON: format and format version, package version, git
                       revision, params_hash (``network_dict.params_hash``: THE identity of
                       g), the exact parameters as exact rational strings ('p/q') with their
                       own sha256 (exact_hash), the certificate with every number exact
                       (a float as its repr, a Fraction as 'p/q'), its arithmetic and
                       assumptions, and how to rebuild g (construction, target, d, n, N,
                       margin, clamp, p); content_sha256 over all of it.

``load(path)`` recomputes params_hash from the arrays, exact_hash from the strings and
content_sha256 from the manifest, and refuses a changed file, a truncated file or another
format version in one line each. ``recheck(loaded, f=None)`` re-runs the certificate: it
rebuilds g from the construction recorded (a built-in target from the file alone; a
callable f passed again), requires the rebuilt g to be the saved network (the same
params_hash and exact_hash), and certifies it again (``yun.certify_lp``).

Parameters go in an npz rather than an orbax checkpoint: one file a colleague can be sent,
NumPy's own format, no thread pools or directories, and the exact rationals (60-94 bits)
that no float array holds sit beside them as strings either way.

Imports: ``yun`` re-exports save / load / recheck, so this module imports ``yun``'s
certificate inside the functions that need it (a module-level import would be circular).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import zipfile
from fractions import Fraction

import numpy as np

from transformer_ua import decimal_text
from transformer_ua import outputs, provenance
from transformer_ua.networks import flat_onnx, network_dict

#: The file format this module writes and reads.
FORMAT = 'transformer_ua.networks.saved_network'
FORMAT_VERSION = 1


def _package_version() -> str:
  try:
    from importlib import metadata  # pylint: disable=import-outside-toplevel
    return metadata.version('transformer_ua')
  except Exception:  # pylint: disable=broad-except -- not installed: the source tree
    return 'unknown'


# -- exact JSON ------------------------------------------------------------------


def _encode(v):
  """JSON with every number exact: floats {'float': repr}, Fractions {'fraction': 'p/q'},
  arrays {'array': nested, 'shape'}, tuples as lists."""
  if isinstance(v, bool) or v is None or isinstance(v, str):
    return v
  if isinstance(v, (int, np.integer)):
    return int(v)
  if isinstance(v, (float, np.floating)):
    return {'float': repr(float(v))}
  if isinstance(v, Fraction):
    return {'fraction': str(v)}
  if isinstance(v, np.ndarray):
    return {'array': [_encode(x) for x in v.reshape(-1).tolist()], 'shape': list(v.shape)}
  if isinstance(v, dict):
    return {'dict': [[_encode(k), _encode(x)] for k, x in v.items()]}
  if isinstance(v, (list, tuple)):
    return [_encode(x) for x in v]
  return {'repr': repr(v)}


def _decode(v):
  if isinstance(v, list):
    return [_decode(x) for x in v]
  if not isinstance(v, dict):
    return v
  if 'float' in v:
    return float(v['float'])
  if 'fraction' in v:
    return Fraction(v['fraction'])
  if 'array' in v:
    return np.asarray([_decode(x) for x in v['array']], dtype=object).reshape(v['shape'])
  if 'dict' in v:
    return {(tuple(k) if isinstance(k, list) else k): _decode(x)
            for k, x in ((_decode(a), b) for a, b in v['dict'])}
  return v['repr']


def _canonical(obj) -> bytes:
  return json.dumps(obj, sort_keys=True, separators=(',', ':')).encode()


# -- exact parameters --------------------------------------------------------------


def _flatten(tree, prefix=''):
  for k in sorted(tree):
    v = tree[k]
    if isinstance(v, dict):
      yield from _flatten(v, f'{prefix}{k}/')
    else:
      yield f'{prefix}{k}', np.asarray(v, dtype=object)


def _exact_strings(g) -> dict | None:
  """{name: {'shape', 'values' ['p/q', ...]}} of g's exact params, or None without them."""
  try:
    exact = g.exact_params()
  except (AttributeError, ValueError):
    return None
  return {name: {'shape': list(a.shape),
                 'values': [str(Fraction(x)) for x in a.reshape(-1).tolist()]}
          for name, a in _flatten(exact)}


def _exact_hash(strings: dict | None) -> str | None:
  if strings is None:
    return None
  return 'sha256:' + hashlib.sha256(_canonical(strings)).hexdigest()


def _exact_arrays(strings: dict | None) -> dict | None:
  if strings is None:
    return None
  return {name: np.asarray([Fraction(s) for s in e['values']], dtype=object).reshape(
      e['shape']) for name, e in strings.items()}


def _net_dict(arrays: dict) -> dict:
  """``Net.arrays()`` names -> the dict format."""
  out, blocks = {}, {}
  for name, a in arrays.items():
    if name.startswith('blocks.'):
      _, i, key = name.split('.')
      blocks.setdefault(int(i), {})[key] = a
    else:
      out[name] = a
  out['blocks'] = [blocks[i] for i in range(len(blocks))]
  return out


def _margin(g, last: dict, cert) -> Fraction:
  """The margin g was realized at: g's own (exact) where it keeps it, else the search's."""
  m = getattr(g, 'margin', None)
  if m is None:
    m = last.get('margin', cert.margin)
  return Fraction(m)


# -- save, load --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SavedNetwork:
  """What ``load`` returns (module docstring).

  Attributes:
    net: the network (``network_dict.Net``, float64 numbers of g's params).
    exact: {name: object array of Fractions} (g's exact params) or None.
    certificate: the ``yun.Certificate``, every number as saved.
    arithmetic: the g the certificate covers ('exact', 'float64', 'float32').
    epsilon: the d_p(f, g) asked for.
    rebuild: how g was built (construction, target, builtin, d, n, resolution, margin,
      tolerance, clamp, p, lipschitz).
    params_hash, exact_hash: the identities checked on load.
    written_by: {'package_version', 'git_revision', 'utc_time', 'machine'}.
  """

  net: network_dict.Net
  exact: dict | None
  certificate: object   # a yun.Certificate
  arithmetic: str
  epsilon: float
  rebuild: dict
  params_hash: str
  exact_hash: str | None
  written_by: dict

  def apply(self, x) -> np.ndarray:
    """g(X) in NumPy in the certificate's format (float64 for 'exact'): a reference run
    (``network_dict.apply``), not the certified evaluation."""
    dt = np.float32 if self.arithmetic == 'float32' else np.float64
    return network_dict.apply(self.net, x, dt).astype(np.float64)

  def line(self) -> str:
    from transformer_ua.yun.bounds import certificate as certificate_lib  # pylint: disable=import-outside-toplevel
    return (f'{self.rebuild["construction"]} network for {self.rebuild["target"]!r} '
            f'(d={self.rebuild["d"]}, n={self.rebuild["n"]}, N={self.rebuild["resolution"]}), '
            f'{self.arithmetic}: d_p(f, g) <= '
            f'{decimal_text.bound_text(self.certificate.total, 4)} (p={self.certificate.p:g}); '
            f'{self.params_hash}')


def save(result, path, *, overwrite: bool = False) -> str:
  """Writes ``result`` (what ``yun.approximate`` returns) to ``path`` (one .npz file,
  written atomically; module docstring). Returns the path.

  Raises ValueError in one line (nothing written) for anything but an Approximation or a
  path that cannot be written; ``outputs.OutputExists`` for an existing file without
  ``overwrite``."""
  for name in ('g', 'net', 'certificate', 'construction', 'arithmetic', 'epsilon'):
    if not hasattr(result, name):
      raise ValueError(f'save needs what yun.approximate returns (an Approximation); '
                       f'{type(result).__name__} has no {name!r}.')
  path = flat_onnx.check_path(path, overwrite)
  g, net, cert = result.g, result.net, result.certificate
  graph = network_dict.from_realized(g)
  exact = _exact_strings(g)
  last = result.attempts[-1] if result.attempts else {}
  target = net.target
  from transformer_ua.targets import functions as targets_lib  # pylint: disable=import-outside-toplevel
  builtin = targets_lib.BUILTIN_TARGETS.get(target.name) is not None
  prov = provenance.record('transformer_ua.networks.saved_network.save')
  manifest = {
      'format': FORMAT, 'format_version': FORMAT_VERSION,
      'written_by': {'package_version': _package_version(),
                     'git_revision': prov['git_revision'], 'utc_time': prov['utc_time'],
                     'machine': prov['machine']},
      'params_hash': network_dict.params_hash(graph), 'architecture': graph.architecture(),
      'exact_hash': _exact_hash(exact), 'exact_params': exact,
      'arithmetic': result.arithmetic, 'epsilon': _encode(float(result.epsilon)),
      'assumptions': list(cert.details.get('assumptions', [])), 'assumes': cert.assumes,
      'certificate': _encode(cert.as_dict()),
      'rebuild': _encode({
          'construction': result.construction, 'target': target.name, 'builtin': builtin,
          'd': int(net.d), 'n': int(net.n), 'resolution': int(net.resolution),
          'positional': bool(net.positional),
          'margin': _margin(g, last, cert),
          'tolerance': last.get('tolerance'), 'clamp': bool(cert.clamp), 'p': cert.p,
          'lipschitz': cert.lipschitz}),
  }
  manifest['content_sha256'] = 'sha256:' + hashlib.sha256(_canonical(manifest)).hexdigest()
  arrays = {f'params/{name}': np.ascontiguousarray(a, '<f8') for name, a in graph.arrays()}
  arrays['manifest'] = np.frombuffer(_canonical(manifest), np.uint8)
  buf = io.BytesIO()
  np.savez(buf, **arrays)
  with outputs.atomic_open(path, 'wb') as f:
    f.write(buf.getvalue())
  return path


def load(path) -> SavedNetwork:
  """The saved network at ``path`` with every identity checked, or ValueError in one line:
  not a file, truncated or not a saved network, another format version, or a changed file
  (parameters, exact parameters or manifest)."""
  if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
    raise ValueError(f'{path!r} is not a file.')
  path = os.fspath(path)
  try:
    with np.load(path, allow_pickle=False) as z:
      files = {k: z[k] for k in z.files}
  except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as e:
    raise ValueError(f'{path!r} is truncated or not a saved network (the archive does not '
                     f'read: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}).'
                     ) from None
  if 'manifest' not in files:
    raise ValueError(f'{path!r} is not a saved network (no manifest).')
  try:
    manifest = json.loads(files['manifest'].tobytes().decode())
  except (UnicodeDecodeError, json.JSONDecodeError):
    raise ValueError(f'{path!r} has a manifest that is not JSON (a changed or truncated '
                     'file).') from None
  if not isinstance(manifest, dict) or manifest.get('format') != FORMAT:
    raise ValueError(f'{path!r} is not a saved network (format '
                     f'{manifest.get("format") if isinstance(manifest, dict) else None!r}).')
  if manifest.get('format_version') != FORMAT_VERSION:
    raise ValueError(f'{path!r} has format version {manifest.get("format_version")!r}; this '
                     f'transformer_ua reads version {FORMAT_VERSION} (written by '
                     f'{manifest.get("written_by", {}).get("package_version")}).')
  body = {k: v for k, v in manifest.items() if k != 'content_sha256'}
  if manifest.get('content_sha256') != 'sha256:' + hashlib.sha256(_canonical(body)).hexdigest():
    raise ValueError(f'{path!r} was changed after saving: its manifest (certificate, exact '
                     'parameters or provenance) does not match its content_sha256.')
  arrays = {k[len('params/'):]: np.asarray(v, np.float64) for k, v in files.items()
            if k.startswith('params/')}
  try:
    net = network_dict.check(_net_dict(arrays), n=int(_decode(manifest['rebuild'])['n']),
                             d=int(_decode(manifest['rebuild'])['d']))
  except ValueError as e:
    raise ValueError(f'{path!r} holds parameters that are not a network ({e})') from None
  got = network_dict.params_hash(net)
  if got != manifest['params_hash']:
    raise ValueError(f'{path!r} was changed after saving: its parameters hash to {got}, the '
                     f'file says {manifest["params_hash"]}.')
  exact = manifest.get('exact_params')
  if _exact_hash(exact) != manifest.get('exact_hash'):
    raise ValueError(f'{path!r} was changed after saving: its exact parameters do not match '
                     'their exact_hash.')
  from transformer_ua.yun.bounds import certificate as certificate_lib  # pylint: disable=import-outside-toplevel
  cert_fields = _decode(manifest['certificate'])
  return SavedNetwork(
      net=net, exact=_exact_arrays(exact),
      certificate=certificate_lib.Certificate(**cert_fields),
      arithmetic=manifest['arithmetic'], epsilon=_decode(manifest['epsilon']),
      rebuild=_decode(manifest['rebuild']), params_hash=manifest['params_hash'],
      exact_hash=manifest.get('exact_hash'), written_by=manifest['written_by'])


def recheck(loaded: SavedNetwork, f=None, *, modulus=None, workers=None) -> dict:
  """Certifies the saved network again (module docstring).

  Args:
    loaded: what ``load`` returned.
    f: None for a built-in target (rebuilt from the file alone); the same callable the
      network was certified for otherwise.
    modulus: the local modulus of f, if the certificate rested on one (not saved).
    workers: where the certificate runs (``yun.certify_lp``).
  Returns:
    {'certificate': the new Certificate, 'total', 'saved_total', 'same_total' (bool)}.
  Raises:
    ValueError in one line: a callable target without f, or a rebuilt g that is not the
    saved network.
  """
  # pylint: disable=import-outside-toplevel
  from transformer_ua import rounding
  from transformer_ua.yun import grid as grid_lib
  from transformer_ua.yun.bounds import certificate as certificate_lib
  from transformer_ua.targets import functions as targets_lib
  from transformer_ua.yun.variants import registry
  r = loaded.rebuild
  if f is None and not r['builtin']:
    raise ValueError(f'the saved network approximates a callable ({r["target"]!r}); pass it '
                     'again as recheck(loaded, f).')
  target = targets_lib.get_target(r['target'] if f is None else f, d=r['d'], n=r['n'])
  variant = registry.VARIANTS[r['construction']](grid_lib.Grid(r['d'], r['n'],
                                                                r['resolution']))
  arith = loaded.arithmetic
  net = variant.build(target, **({'number_format': arith} if arith in rounding.FORMATS
                                 else {}))
  kwargs = {} if r['tolerance'] is None else {'tolerance': r['tolerance']}
  g = net.realize(margin=r['margin'], dtype='exact', clamp=r['clamp'], **kwargs)
  got = network_dict.params_hash(network_dict.from_realized(g))
  exact = _exact_hash(_exact_strings(g))
  if got != loaded.params_hash or exact != loaded.exact_hash:
    raise ValueError(f'the network rebuilt from the file ({got}) is not the saved one '
                     f'({loaded.params_hash}); re-checking it would certify another network.')
  cert = certificate_lib.certify_lp(net, g, r['p'], lipschitz=r['lipschitz'] if f is not None
                                    and r['lipschitz'] is not None else None,
                                    modulus=modulus, margin=r['margin'], workers=workers,
                                    arithmetic=arith)
  return {'certificate': cert, 'total': cert.total, 'saved_total': loaded.certificate.total,
          'same_total': cert.total == loaded.certificate.total}
