r"""A certified network in one file: save, load (with its checks) and re-check.

``save(result, path)`` writes a certified network with its certificate as one NumPy ``.npz``
archive (loaded with ``allow_pickle=False``: no code runs on load). ``result`` is one of

    kind 'approximation'        what ``yun.approximate`` returns: g, its construction and its
                                ``yun`` Certificate
    kind 'network_certificate'  what ``certify.certify_network`` returns, with the network it
                                certifies: save(cert, path, g=g) (a certificate holds g's
                                params_hash, not g); refused unless g hashes to it
    kind 'trained_certificate'  what ``certify.train_and_certify`` returns: its net, its
                                NetworkCertificate and the search's trials

The archive, format version 2:

    params/<place>  float64 arrays, one per array of ``Net.as_dict()``, named by its place
                    there: embed, blocks.<i>.W_Q, blocks.<i>.ln_attn.gamma, final_ln.beta, ...
    manifest        UTF-8 JSON: format, format_version, kind, package version, git revision,
                    params_hash (``network_dict.params_hash``: THE identity of g), the layout
                    (``Net.as_dict()`` with each array replaced by its params/ name and every
                    other leaf -- a scale, an eps, an activation, a mask -- kept exactly), d
                    and n, the certificate with every number exact (a float as its repr, a
                    Fraction as 'p/q'), its arithmetic, and how to rebuild g or re-run the
                    certificate ('rebuild'); for an approximation the exact parameters as
                    rational strings with their own sha256 (exact_hash); for a trained one the
                    trials; content_sha256 over all of it.

``load(path)`` rebuilds the dict from the layout and the arrays, checks it
(``network_dict.check``), recomputes params_hash from the checked net (and compares it with
the certificate's own), exact_hash from the strings and content_sha256 from the manifest,
and refuses a changed file, a truncated file, an array the layout does not name, or a
format version it does not read, in one line each. Version 1 files (approximations only:
the arrays under their ``Net.arrays`` names, no layout) still load.

``recheck(loaded, f=None)`` certifies the saved network again with the saved settings:

    approximation   g rebuilt from its construction must be the saved network (params_hash
                    and exact_hash); then ``yun.certify_lp``, deterministic: the same total.
    certificates    ``certify_network`` on the saved network, with the saved f (a built-in
                    by its name; a callable passed again, with its lipschitz= or modulus=),
                    d, n, p, arithmetic and epsilon. Its stop: max_rounds = the saved rounds
                    where certify_network takes max_rounds=; else epsilon, deterministic
                    when the saved run reached it, within a budget (max_minutes=, or the
                    saved one, or twice the saved run's seconds and at least
                    RECHECK_MIN_MINUTES). A budget stop depends on the machine's speed: a
                    rerun stopped by it is NOT a proof that the two totals are equal.

It reports both totals ('total', 'saved_total', 'same_total', and 'confirmed' = total <=
saved_total: the new proof covers the saved claim) and refuses in one line when the saved
total is below the recomputed one by more than RECHECK_RTOL (relative). The allowance is
for the same boxes certified on another machine (its libm exp, its BLAS summation order),
taken to move a total by a few ulps, far below 2^-30 (assumed, not measured); a larger gap
is another certificate (another f, g or setting, or a shorter run).

An npz rather than an orbax checkpoint: one file a colleague can be sent, NumPy's own
format; the exact rationals (60-94 bits) that no float array holds sit beside it as strings.

Imports run one way (``certify`` and ``yun`` import ``networks``): this module imports them
only inside the functions that need a certificate's class or a certifier (lazy, marked).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import io
import json
import math
import os
import zipfile
from fractions import Fraction

import numpy as np

from transformer_ua import decimal_text, outputs, provenance
from transformer_ua.networks import exact_json, flat_onnx, network_apply, network_dict
from transformer_ua.networks import project_import

# pylint: disable=import-outside-toplevel  -- the lazy imports of certify and yun (docstring)

#: The file format this module writes and reads.
FORMAT = 'transformer_ua.networks.saved_network'
#: Its name in version 1 files, written before the module moved into networks/.
FORMAT_V1 = 'transformer_ua.saved_network'
#: The version ``save`` writes.
FORMAT_VERSION = 2
#: The versions ``load`` reads (1: approximations, arrays under ``Net.arrays`` names).
READABLE_VERSIONS = (1, 2)
#: What a file holds (module docstring).
KINDS = ('approximation', 'network_certificate', 'trained_certificate')
#: recheck refuses a recomputed total above the saved one by more than this, relative.
RECHECK_RTOL = Fraction(1, 2 ** 30)
#: The least budget of a certificate's recheck without max_minutes (minutes).
RECHECK_MIN_MINUTES = 1.0


def _package_version() -> str:
  try:
    from importlib import metadata  # lazy
    return metadata.version('transformer_ua')
  except Exception:  # pylint: disable=broad-except -- not installed: the source tree
    return 'unknown'


# -- exact parameters --------------------------------------------------------------


def _sha256(obj) -> str:
  return 'sha256:' + hashlib.sha256(exact_json.canonical(obj)).hexdigest()


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
  return None if strings is None else _sha256(strings)


def _exact_arrays(strings: dict | None) -> dict | None:
  if strings is None:
    return None
  return {name: np.asarray([Fraction(s) for s in e['values']], dtype=object).reshape(
      e['shape']) for name, e in strings.items()}


def _net_dict_v1(arrays: dict) -> dict:
  """Version 1's ``Net.arrays()`` names (embed, blocks.<i>.W_Q, ...) -> the dict format."""
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


# -- the network's layout ------------------------------------------------------------


def _layout(tree, place: str, arrays: dict):
  """``Net.as_dict()`` as JSON: each array moved into ``arrays`` under its dotted place
  (float64; integer and boolean arrays as they are), every other leaf kept exactly."""
  def at(key):
    return f'{place}.{key}' if place else str(key)
  if isinstance(tree, dict):
    return {'dict': {str(k): _layout(v, at(k), arrays) for k, v in tree.items()}}
  if isinstance(tree, (list, tuple)):
    return {'list': [_layout(v, at(i), arrays) for i, v in enumerate(tree)]}
  if isinstance(tree, np.ndarray):
    a = np.asarray(tree)
    arrays[place] = a.copy() if a.dtype.kind in 'biu' else np.ascontiguousarray(a, '<f8')
    return {'array': place}
  return {'leaf': exact_json.encode(tree)}


def _unlayout(layout, arrays: dict, used: set, path: str):
  """The dict ``_layout`` wrote, its arrays taken from ``arrays`` (names put in ``used``)."""
  if not isinstance(layout, dict) or len(layout) != 1:
    raise ValueError(f'{path!r} has a network layout that does not read (a changed file).')
  (how, v), = layout.items()
  if how == 'dict':
    return {k: _unlayout(x, arrays, used, path) for k, x in v.items()}
  if how == 'list':
    return [_unlayout(x, arrays, used, path) for x in v]
  if how == 'array':
    if v not in arrays:
      raise ValueError(f'{path!r} was changed after saving: its layout names params/{v}, '
                       'which the archive lacks.')
    used.add(v)
    return arrays[v]
  if how == 'leaf':
    return exact_json.decode(v)
  raise ValueError(f'{path!r} has a network layout that does not read (a changed file).')


# -- what is saved ---------------------------------------------------------------------


def _kind(result) -> str:
  """Which of KINDS ``result`` is, or ValueError in one line."""
  if all(hasattr(result, a) for a in ('g', 'net', 'certificate', 'construction', 'arithmetic',
                                      'epsilon', 'attempts')):
    return 'approximation'
  from transformer_ua.certify import network_certificate  # lazy: certify imports networks
  if isinstance(result, network_certificate.NetworkCertificate):
    return 'network_certificate'
  from transformer_ua.certify import trainer  # lazy: certify imports networks
  if isinstance(result, trainer.TrainedCertificate):
    return 'trained_certificate'
  raise ValueError('save needs what yun.approximate, certify.certify_network or '
                   f'certify.train_and_certify returns; a {type(result).__name__} is none of '
                   'these.')


def _approximation(result):
  """(net, d, n, manifest entries) of what ``yun.approximate`` returns."""
  g, spec, cert = result.g, result.net, result.certificate
  net = project_import.from_realized(g)
  exact = _exact_strings(g)
  last = result.attempts[-1] if result.attempts else {}
  target = spec.target
  from transformer_ua.targets import functions as targets_lib  # lazy
  builtin = targets_lib.BUILTIN_TARGETS.get(target.name) is not None
  entries = {
      'exact_hash': _exact_hash(exact), 'exact_params': exact,
      'arithmetic': result.arithmetic,
      'epsilon': exact_json.encode(float(result.epsilon)),
      'assumptions': list(cert.details.get('assumptions', [])), 'assumes': cert.assumes,
      'certificate': exact_json.encode(cert.as_dict()),
      'rebuild': exact_json.encode({
          'construction': result.construction, 'target': target.name, 'builtin': builtin,
          'd': int(spec.d), 'n': int(spec.n), 'resolution': int(spec.resolution),
          'positional': bool(spec.positional), 'margin': _margin(g, last, cert),
          'tolerance': last.get('tolerance'), 'clamp': bool(cert.clamp), 'p': cert.p,
          'lipschitz': cert.lipschitz})}
  return net, int(spec.d), int(spec.n), entries


def _certified(result, kind: str, g, max_minutes):
  """(net, d, n, manifest entries) of a NetworkCertificate (with its g) or a
  TrainedCertificate."""
  if kind == 'network_certificate':
    if g is None:
      raise ValueError('a NetworkCertificate holds the params_hash of its network, not the '
                       'network: pass it as save(certificate, path, g=g).')
    from transformer_ua.networks import source_check   # lazy: torch / flax on demand
    cert = result
    net, _ = source_check.read_network(g, d=cert.d, n=cert.n, arithmetic=cert.arithmetic)
    training = None
  else:
    if result.certificate is None:
      raise ValueError('this TrainedCertificate holds no certified network (no candidate was '
                       'certified within its budget); there is nothing to save.')
    cert, net = result.certificate, result.net
    training = {'seed': result.seed, 'epsilon': result.epsilon, 'reached': result.reached,
                'seconds': result.seconds, 'trials': [t.row() for t in result.trials],
                'line': result.line()}
  cert.check_network(net)                  # one line unless g is the network certified
  if max_minutes is not None and (isinstance(max_minutes, bool) or not isinstance(
      max_minutes, (int, float)) or not 0 < max_minutes < math.inf):
    raise ValueError(f'max_minutes={max_minutes!r}; it must be a positive number of minutes '
                     '(the budget the certificate was run with), or None.')
  from transformer_ua.targets import functions as targets_lib  # lazy
  builtin = (cert.target in targets_lib.BUILTIN_TARGETS
             and not cert.f_side.startswith('callable'))
  entries = {
      'exact_hash': None, 'exact_params': None, 'arithmetic': cert.arithmetic,
      'epsilon': exact_json.encode(cert.epsilon), 'assumptions': list(cert.assumptions),
      'certificate': exact_json.encode({f.name: getattr(cert, f.name)
                                        for f in dataclasses.fields(cert)}),
      'rebuild': exact_json.encode({
          'target': cert.target, 'builtin': builtin, 'd': cert.d, 'n': cert.n, 'p': cert.p,
          'arithmetic': cert.arithmetic, 'epsilon': cert.epsilon,
          'max_minutes': None if max_minutes is None else float(max_minutes),
          'rounds': cert.rounds, 'boxes': cert.boxes}),
      'training': exact_json.encode(training)}
  return net, cert.d, cert.n, entries


def _network_certificate(fields: dict, path: str):
  """The NetworkCertificate of the saved fields (lists back to tuples, arrays to float64)."""
  from transformer_ua.certify import network_certificate  # lazy
  cls = network_certificate.NetworkCertificate
  known = dataclasses.fields(cls)
  missing = [f.name for f in known if f.name not in fields
             and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
  if missing:
    raise ValueError(f'{path!r} holds a certificate without {", ".join(missing)}: written by '
                     'another version of the certifier than this one reads.')

  def plain(v):
    if isinstance(v, list):
      return tuple(plain(x) for x in v)
    if isinstance(v, np.ndarray):
      return np.asarray(v, np.float64)
    return v
  return cls(**{f.name: plain(fields[f.name]) for f in known if f.name in fields})


# -- save, load --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SavedNetwork:
  """What ``load`` returns (module docstring).

  Attributes:
    kind: one of KINDS.
    net: the network (``network_dict.Net``, float64 numbers of g's params).
    exact: {name: object array of Fractions} (an approximation's exact params) or None.
    certificate: the ``yun`` Certificate (an approximation) or the NetworkCertificate,
      every number as saved.
    arithmetic: the g the certificate covers ('exact', 'float64', 'float32', ...).
    epsilon: the d_p(f, g) asked for (None: a certificate asked for none).
    rebuild: how to rebuild g (approximation: construction, target, builtin, d, n,
      resolution, margin, tolerance, clamp, p, lipschitz) or re-run the certificate
      (target, builtin, d, n, p, arithmetic, epsilon, max_minutes, rounds, boxes).
    params_hash, exact_hash: the identities checked on load.
    written_by: {'package_version', 'git_revision', 'utc_time', 'machine'}.
    format_version: the version of the file read.
    training: a trained certificate's search (seed, epsilon, reached, seconds, trials,
      line), else None.
  """

  kind: str
  net: network_dict.Net
  exact: dict | None
  certificate: object
  arithmetic: str
  epsilon: object
  rebuild: dict
  params_hash: str
  exact_hash: str | None
  written_by: dict
  format_version: int
  training: dict | None = None

  def apply(self, x) -> np.ndarray:
    """g(X) in NumPy in the certificate's storage format (float64 for 'exact' and
    'float64', float32 otherwise): a reference run (network_apply), not the certified one."""
    dt = np.float64 if self.arithmetic in ('exact', 'float64') else np.float32
    return network_apply.apply(self.net, x, dt).astype(np.float64)

  def line(self) -> str:
    if self.kind == 'network_certificate':
      return self.certificate.line()
    if self.kind == 'trained_certificate':
      return self.training['line']
    r = self.rebuild
    return (f'{r["construction"]} network for {r["target"]!r} (d={r["d"]}, n={r["n"]}, '
            f'N={r["resolution"]}), {self.arithmetic}: d_p(f, g) <= '
            f'{decimal_text.bound_text(self.certificate.total, 4)} (p={self.certificate.p:g}); '
            f'{self.params_hash}')


def save(result, path, *, g=None, max_minutes=None, overwrite: bool = False) -> str:
  """Writes ``result`` with its network to ``path`` (one .npz file, written atomically;
  module docstring). Returns the path.

  Args:
    result: what ``yun.approximate``, ``certify.certify_network`` or
      ``certify.train_and_certify`` returns.
    path: the file to write.
    g: the network a NetworkCertificate certifies (anything ``certify_network`` takes as
      g); only with a NetworkCertificate.
    max_minutes: the budget a certificate was run with, for its recheck (optional).
    overwrite: replace an existing file.
  Raises:
    ValueError in one line (nothing written): another kind of result, a NetworkCertificate
    without its g or with another g, a TrainedCertificate without a certificate, or a path
    that cannot be written; ``outputs.OutputExists`` for an existing file without
    ``overwrite``.
  """
  kind = _kind(result)
  if kind != 'network_certificate' and g is not None:
    raise ValueError(f'g= is for a NetworkCertificate; a {type(result).__name__} holds its '
                     'network already.')
  if kind == 'approximation':
    if max_minutes is not None:
      raise ValueError('max_minutes= is for a certificate; an approximation rechecks '
                       'without a budget.')
    net, d, n, entries = _approximation(result)
  else:
    net, d, n, entries = _certified(result, kind, g, max_minutes)
  path = flat_onnx.check_path(path, overwrite)
  arrays = {}
  layout = _layout(net.as_dict(), '', arrays)
  prov = provenance.record('transformer_ua.networks.saved_network.save')
  manifest = {
      'format': FORMAT, 'format_version': FORMAT_VERSION, 'kind': kind,
      'written_by': {'package_version': _package_version(),
                     'git_revision': prov['git_revision'], 'utc_time': prov['utc_time'],
                     'machine': prov['machine']},
      'params_hash': network_dict.params_hash(net), 'architecture': net.architecture(),
      'd': d, 'n': n, 'layout': layout, **entries}
  manifest['content_sha256'] = _sha256(manifest)
  files = {f'params/{name}': a for name, a in arrays.items()}
  files['manifest'] = np.frombuffer(exact_json.canonical(manifest), np.uint8)
  buf = io.BytesIO()
  np.savez(buf, **files)
  with outputs.atomic_open(path, 'wb') as f:
    f.write(buf.getvalue())
  return path


def _read_manifest(path) -> tuple:
  """(manifest, {params name: array}) of the archive at ``path``, its format, version and
  content_sha256 checked; ValueError in one line otherwise."""
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
  if not isinstance(manifest, dict) or manifest.get('format') not in (FORMAT, FORMAT_V1) or (
      manifest.get('format') == FORMAT_V1 and manifest.get('format_version') != 1):
    raise ValueError(f'{path!r} is not a saved network (format '
                     f'{manifest.get("format") if isinstance(manifest, dict) else None!r}).')
  if manifest.get('format_version') not in READABLE_VERSIONS:
    raise ValueError(f'{path!r} has format version {manifest.get("format_version")!r}; this '
                     f'transformer_ua reads versions {", ".join(map(str, READABLE_VERSIONS))} '
                     f'(written by {manifest.get("written_by", {}).get("package_version")}).')
  body = {k: v for k, v in manifest.items() if k != 'content_sha256'}
  if manifest.get('content_sha256') != _sha256(body):
    raise ValueError(f'{path!r} was changed after saving: its manifest (certificate, exact '
                     'parameters or provenance) does not match its content_sha256.')
  arrays = {k[len('params/'):]: v for k, v in files.items() if k.startswith('params/')}
  return manifest, arrays


def load(path) -> SavedNetwork:
  """The saved network at ``path`` with every identity checked, or ValueError in one line:
  not a file, truncated or not a saved network, a format version not read here, or a
  changed file (parameters, layout, exact parameters or manifest)."""
  manifest, arrays = _read_manifest(path)
  version = manifest['format_version']
  kind = manifest.get('kind', 'approximation') if version >= 2 else 'approximation'
  if kind not in KINDS:
    raise ValueError(f'{path!r} holds a {kind!r}; this transformer_ua reads {KINDS}.')
  rebuild = exact_json.decode(manifest['rebuild'])
  if version == 1:
    d, n = int(rebuild['d']), int(rebuild['n'])
    tree = _net_dict_v1({k: np.asarray(v, np.float64) for k, v in arrays.items()})
  else:
    d, n, used = int(manifest['d']), int(manifest['n']), set()
    tree = _unlayout(manifest['layout'], arrays, used, os.fspath(path))
    if set(arrays) - used:
      raise ValueError(f'{path!r} was changed after saving: it holds arrays its layout does '
                       f'not name ({", ".join(sorted(set(arrays) - used))}).')
  try:
    net = network_dict.check(tree, n=n, d=d)
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
  fields = exact_json.decode(manifest['certificate'])
  if kind == 'approximation':
    from transformer_ua.yun.bounds import certificate as certificate_lib  # lazy
    cert = certificate_lib.Certificate(**fields)
  else:
    cert = _network_certificate(fields, os.fspath(path))
    if cert.params_hash != got:
      raise ValueError(f'{path!r} holds a certificate for g {cert.params_hash[:19]} beside the '
                       f'network {got[:19]}: a changed file.')
  return SavedNetwork(
      kind=kind, net=net, exact=_exact_arrays(exact), certificate=cert,
      arithmetic=manifest['arithmetic'], epsilon=exact_json.decode(manifest['epsilon']),
      rebuild=rebuild, params_hash=manifest['params_hash'],
      exact_hash=manifest.get('exact_hash'), written_by=manifest['written_by'],
      format_version=version, training=exact_json.decode(manifest.get('training')))


# -- recheck -----------------------------------------------------------------------


def recheck(loaded: SavedNetwork, f=None, *, lipschitz=None, modulus=None, max_minutes=None,
            workers=None) -> dict:
  """Certifies the saved network again (module docstring).

  Args:
    loaded: what ``load`` returned.
    f: None for a built-in target (rebuilt from the file alone); the same callable the
      network was certified for otherwise.
    lipschitz, modulus: a callable f's constant or modulus, as given to the certifier
      (an approximation: ``modulus`` only, if its certificate rested on one). Not saved.
    max_minutes: a certificate's budget (module docstring); not for an approximation.
    workers: where the certificate runs (``yun.certify_lp`` / ``certify_network``).
  Returns:
    {'certificate': the new certificate, 'total', 'saved_total', 'same_total',
     'confirmed' (total <= saved_total), 'stop' (how the recheck stopped, in words)}.
  Raises:
    ValueError in one line: a callable target without f, a rebuilt g that is not the saved
    network, or a recomputed total above the saved one by more than RECHECK_RTOL.
  """
  r = loaded.rebuild
  if f is None and not r['builtin']:
    raise ValueError(f'the saved network approximates a callable ({r["target"]!r}); pass it '
                     'again as recheck(loaded, f) (with its lipschitz= or modulus=).')
  if loaded.kind == 'approximation':
    if lipschitz is not None or max_minutes is not None:
      raise ValueError('an approximation rechecks with the lipschitz it saved and no budget; '
                       'pass f (and modulus=) only.')
    cert, stop = _recheck_approximation(loaded, f, modulus, workers), 'deterministic'
  else:
    cert, stop = _recheck_certificate(loaded, f, lipschitz, modulus, max_minutes, workers)
  total, saved = Fraction(cert.total), Fraction(loaded.certificate.total)
  if total > saved * (1 + RECHECK_RTOL):
    new, old = (decimal_text.bound_text(math.nextafter(float(t), math.inf), 6)
                for t in (total, saved))
    raise ValueError(f'the recheck proves d_p(f, g) <= {new}, above the saved {old} by more '
                     'than the relative 2^-30 that rounding on another machine explains: the '
                     f'saved certificate is not reproduced (stopped by {stop}).')
  return {'certificate': cert, 'total': cert.total, 'saved_total': loaded.certificate.total,
          'same_total': total == saved, 'confirmed': total <= saved, 'stop': stop}


def _recheck_approximation(loaded: SavedNetwork, f, modulus, workers):
  """g rebuilt from its construction, required to be the saved network, certified again."""
  # lazy: yun imports networks
  from transformer_ua import rounding
  from transformer_ua.targets import functions as targets_lib
  from transformer_ua.yun import grid as grid_lib
  from transformer_ua.yun.bounds import certificate as certificate_lib
  from transformer_ua.yun.variants import registry
  r = loaded.rebuild
  target = targets_lib.get_target(r['target'] if f is None else f, d=r['d'], n=r['n'])
  variant = registry.VARIANTS[r['construction']](grid_lib.Grid(r['d'], r['n'],
                                                                r['resolution']))
  arith = loaded.arithmetic
  net = variant.build(target, **({'number_format': arith} if arith in rounding.FORMATS
                                 else {}))
  kwargs = {} if r['tolerance'] is None else {'tolerance': r['tolerance']}
  g = net.realize(margin=r['margin'], dtype='exact', clamp=r['clamp'], **kwargs)
  got = network_dict.params_hash(project_import.from_realized(g))
  exact = _exact_hash(_exact_strings(g))
  if got != loaded.params_hash or exact != loaded.exact_hash:
    raise ValueError(f'the network rebuilt from the file ({got}) is not the saved one '
                     f'({loaded.params_hash}); re-checking it would certify another network.')
  return certificate_lib.certify_lp(net, g, r['p'], lipschitz=r['lipschitz'] if f is not None
                                    and r['lipschitz'] is not None else None,
                                    modulus=modulus, margin=r['margin'], workers=workers,
                                    arithmetic=arith)


def _recheck_certificate(loaded: SavedNetwork, f, lipschitz, modulus, max_minutes, workers):
  """(certify_network's new certificate of the saved network, the stop in words)."""
  from transformer_ua.certify import network_certificate  # lazy
  r, saved = loaded.rebuild, loaded.certificate
  if f is not None:
    from transformer_ua.targets import functions as targets_lib  # lazy
    name = targets_lib.get_target(f, d=r['d'], n=r['n']).name
    if name != r['target']:
      raise ValueError(f'f is {name!r}; the saved certificate is for {r["target"]!r}: pass the '
                       'target it was certified for.')
  budget = max_minutes if max_minutes is not None else r.get('max_minutes')
  if budget is None:
    budget = max(RECHECK_MIN_MINUTES, 2 * saved.seconds / 60)
  kwargs = {'d': r['d'], 'n': r['n'], 'p': r['p'], 'arithmetic': r['arithmetic'],
            'epsilon': r['epsilon'], 'max_minutes': budget, 'lipschitz': lipschitz,
            'modulus': modulus, 'workers': workers}
  if 'max_rounds' in inspect.signature(network_certificate.certify_network).parameters:
    kwargs['max_rounds'] = r['rounds']
    stop = f'max_rounds={r["rounds"]}, as saved'
  elif saved.reached:
    stop = (f'epsilon {float(r["epsilon"]):g}, which the saved run reached (deterministic), '
            f'within {budget:g} min')
  else:
    stop = (f'a budget of {budget:g} min (the speed of this machine: not a proof that the '
            'totals are equal)')
  cert = network_certificate.certify_network(r['target'] if f is None else f, loaded.net,
                                             **kwargs)
  if cert.params_hash != loaded.params_hash:
    raise ValueError(f'the recheck certified g {cert.params_hash[:19]}, not the saved '
                     f'{loaded.params_hash[:19]}.')
  return cert, stop
