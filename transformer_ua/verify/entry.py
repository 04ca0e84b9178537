r"""verify/'s one entry point: ``verify(subject, enumeration=...)`` for every variant.

``subject`` is a variant (``yun.variants.registry.choose(d, n, N, ...)``, decided once by
the caller) or a built g_c; its type picks the kind of check (``KINDS``), and each kind
is an object whose methods say what differs -- no branch on flags:

    subject                        check              runs (module)                enumerations
    Paper (variant)                Theorem2Check      g_q, g_c, g_v: Lemmas 7-10   full | multiset
                                                      (``theorem2``)
    ContextualMapping (built g_c)  ContextualCheck    Lemma 8 / 10 on g_c          full | multiset
                                                      (``contextual_mapping``)
    TiesComplete (variant)         TiesVariantCheck   builds g_c, then TiesCheck   full | multiset
    TiesContextualMapping (built)  TiesCheck          T1-T3 (``contextual_ties``)  full | multiset
    OneLayer (variant)             OneLayerCheck      certified ids of one softmax multiset
                                                      layer (``one_layer``)

``enumeration`` names the points of G+_delta run: 'full' (every ordered point) or
'multiset' (one per permutation class; OneLayer certifies every context, a multiset of
n cells, and every token of it). Theorem 3 (``Positional``) has no whole-grid check here:
its g_bar equals f_bar by construction (``Variant.exact_by_construction``).

``verify_and_record`` is the binaries' one call: the check, its summary lines on stdout,
the result as JSON (``record_name``: the file name each kind writes).
"""

from __future__ import annotations

import abc
import time
from typing import ClassVar

from transformer_ua import outputs, provenance
from transformer_ua.verify import contextual_mapping, contextual_ties, theorem2, timing
from transformer_ua.yun import enumeration as enumeration_lib
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual
from transformer_ua.yun.stages import contextual_ties as ties_stage
from transformer_ua.yun.variants.one_layer import OneLayer
from transformer_ua.yun.variants.paper import Paper
from transformer_ua.yun.variants.ties_complete import TiesComplete


def _verdict(result: dict) -> str:
  return 'ALL PROPERTIES HOLD' if result['all_hold'] else 'SOME PROPERTY FAILED'


def _violation_lines(violations: dict) -> list[str]:
  width = max(len(k) for k in violations)
  return [f"  {prop:<{width}}  {'ok' if count == 0 else f'{count} VIOLATIONS'}"
          for prop, count in violations.items()]


class Check(abc.ABC):
  """One kind of check of a ``subject`` (module docstring). ``grid``: its ``Grid``."""

  #: The enumerations of G+_delta this kind runs.
  enumerations: ClassVar[tuple[str, ...]] = enumeration_lib.GRIDS
  #: Indent of the JSON record (as each binary has always written it).
  json_indent: ClassVar[int] = 2

  def __init__(self, subject):
    self.subject = subject
    self.grid = self.grid_of(subject)

  @staticmethod
  def grid_of(subject) -> Grid:
    """A variant's grid; a built g_c's from its d, n, resolution."""
    return subject.grid

  @abc.abstractmethod
  def check(self, enumeration: str, **options) -> dict:
    """The result dict (``violations``, ``all_hold``, ``provenance``, ...)."""

  @abc.abstractmethod
  def record_name(self, enumeration: str) -> str:
    """File name of the JSON record of a run."""

  @abc.abstractmethod
  def summary(self, result: dict) -> list[str]:
    """Lines printed after a run."""


class _BuiltCheck(Check):
  """A check of a built g_c: its grid is (cm.d, cm.n, cm.resolution)."""

  @staticmethod
  def grid_of(subject) -> Grid:
    return Grid(subject.d, subject.n, subject.resolution)


class Theorem2Check(Check):
  """``Paper``: g_q, g_c and g_v built and verified (``theorem2.verify_theorem2``)."""

  def check(self, enumeration, **options):
    return theorem2.verify_theorem2(self.grid, enumeration=enumeration, **options)

  def record_name(self, enumeration):
    g = self.grid
    return f'contextual_mapping_N{g.N}_d{g.d}_n{g.n}_{enumeration}.json'

  def summary(self, result):
    r = result
    lines = [f"d={r['d']} n={r['n']} N={r['resolution']} grid={r['grid']}: "
             f"{r['grid_points']:,} points, arithmetic {r['arithmetic_detail']}, kernel "
             f"{r['kernel']}, {r['devices']} device(s), {r['seconds']} s "
             f"(grid check {r['grid_check_seconds']} s)",
             '  seconds by phase: ' + ', '.join(f'{k} {v}' for k, v in
                                                r['phase_seconds'].items())]
    if 'full_pass' in r:
      f = r['full_pass']
      lines.append(f"  full grid pass: {f['points_run']:,} points in {f['seconds']} s = "
                   f"{f['points_per_second'] / 1e6:.2f}M points/s "
                   f"({f['points_per_cpu_second'] / 1e6:.2f}M per CPU second), "
                   f"{100 * f['fraction_of_alu_limit']:.0f}% of the ALU roofline "
                   f"{f['alu_limit_points_per_second'] / 1e6:.1f}M points/s "
                   f"({f['ops_per_point']} int ops/point, {f['cores']} cores x 1.2e10 ops/s)"
                   + (f", resumed at block {f['resumed_from']:,}" if f['resumed_from'] else ''))
    lines += _violation_lines(r['violations'])
    if 'float' in r:
      lines += [f"  paper-valued {name} network on {r['float']['points']:,} classes: "
                f"{r['float'][name]}" for name in ('float64', 'float32')]
    return lines + [_verdict(r)]


class ContextualCheck(_BuiltCheck):
  """A built Lemma 8 g_c (``contextual_mapping.verify_contextual_mapping``)."""

  def check(self, enumeration, **options):
    return contextual_mapping.verify_contextual_mapping(self.subject, enumeration=enumeration,
                                                        **options)

  def record_name(self, enumeration):
    g = self.grid
    return f'contextual_mapping_N{g.N}_d{g.d}_n{g.n}_{enumeration}.json'

  def summary(self, result):
    r = result
    return ([f"d={r['d']} n={r['n']} N={r['resolution']} grid={r['grid']}: "
             f"{r['grid_points']:,} points, arithmetic {r['arithmetic_detail']}, kernel "
             f"{r['kernel']}, {r['devices']} device(s), {r['seconds']} s"]
            + _violation_lines(r['violations']) + [_verdict(r)])


class TiesCheck(_BuiltCheck):
  """A built tie-complete g_c (``contextual_ties.verify``)."""

  json_indent = 1

  def check(self, enumeration, **options):
    return contextual_ties.verify(self.subject, enumeration=enumeration, **options)

  def record_name(self, enumeration):
    g = self.grid
    return f'ties_contextual_N{g.N}_d{g.d}_n{g.n}_{enumeration}.json'

  def summary(self, result):
    res = result
    bad = {k: v for k, v in res['violations'].items() if v}
    return [f'd={res["d"]} n={res["n"]} N={res["resolution"]} {res["grid"]}: '
            f'{res["grid_points"]} points, {res["distinct_ids"]} distinct ids '
            f'(expected {res["expected_ids"]}), {res["arithmetic"]}, observed '
            f'{res["max_abs_bits"]} bits, {res["num_layers"]} layers, {res["seconds"]} s: '
            + ('all properties hold' if not bad else f'VIOLATIONS {bad}')]


class TiesVariantCheck(TiesCheck):
  """``TiesComplete``: its g_c built (``Variant.build_contextual``, option ``arithmetic``),
  then ``TiesCheck``."""

  @staticmethod
  def grid_of(subject) -> Grid:
    return subject.grid

  def check(self, enumeration, *, arithmetic: str = 'auto', **options):
    cm = self.subject.build_contextual(scale=None, arithmetic=arithmetic)
    return TiesCheck(cm).check(enumeration, **options)


class OneLayerCheck(Check):
  """``OneLayer``: the certified ids of one softmax attention layer
  (``one_layer.verify_one_layer``), with the provenance of the run."""

  enumerations = ('multiset',)

  def check(self, enumeration, **options):
    # Imported here: arb (flint) and mpmath are needed by this check alone.
    from transformer_ua.verify import one_layer  # pylint: disable=import-outside-toplevel
    prov = provenance.record()
    return {'provenance': prov, **one_layer.verify_one_layer(self.grid, **options)}

  def record_name(self, enumeration):
    g = self.grid
    return f'd{g.d}_n{g.n}_N{g.N}.json'

  def summary(self, result):
    r = result
    m, f = r['mpmath'], r['float64']
    return [
        f"one softmax attention layer, d={r['d']} n={r['n']} N={r['resolution']}: "
        f"{r['contexts']:,} contexts, {r['ids']:,} (context, token) ids "
        f"({r['ids_with_repeated_tokens']:,} with repeated tokens), lam={r['lam']:.6g}, "
        f"{r['bits']} bits, {r['seconds']:.2f} s (enclosures {r['enclosure_seconds']:.2f} s)",
        f"  certified min id gap {r['certified_min_id_gap']:.4g} (proved bound "
        f"{r['proved_min_id_gap']:.4g}); mean gap {r['certified_min_gap_mean']:.4g} >= "
        f"required {r['required_gap_mean']:.4g}: "
        + ('ok' if not r['violations'] else
           f"{r['violations']} VIOLATIONS ({r['overlaps']} overlapping)"),
        f"  mpmath ({m['precision_bits']} bits) on {m['rows']} ids: "
        + ('all inside the enclosures' if not m['outside'] else f"{m['outside']} OUTSIDE"),
        f"  float64 brute-force sort: {f['pairs_checked']:,} resolvable adjacent pairs, "
        f"{f['disagreements']} disagreements, {f['pairs_below_float64_resolution']:,} below "
        'float64 resolution',
        _verdict(r)]


#: The kind of check of each subject type (module docstring).
KINDS = {Paper: Theorem2Check, TiesComplete: TiesVariantCheck, OneLayer: OneLayerCheck,
         contextual.ContextualMapping: ContextualCheck,
         ties_stage.TiesContextualMapping: TiesCheck}


def kind(subject) -> Check:
  """The ``Check`` of ``subject`` (a variant or a built g_c, ``KINDS``).

  Raises:
    ValueError: a subject with no whole-grid check.
  """
  check = KINDS.get(type(subject))
  if check is None:
    raise ValueError(f'no whole-grid verification of {subject!r}; verify.entry checks '
                     f'{", ".join(t.__name__ for t in KINDS)}.')
  return check(subject)


def verify(subject, *, enumeration: str = 'multiset', **options) -> dict:
  """Verifies ``subject`` (a variant or a built g_c) on the ``enumeration`` of its grid.

  ``options`` go to the kind's check (module docstring): e.g. ``chunk_size``,
  ``kernel``, ``progress`` (Theorem 2, g_c), ``arithmetic`` (Theorem 2, TiesComplete),
  ``lam``, ``bits``, ``samples`` (OneLayer).

  Returns:
    the kind's result dict (``violations``, ``all_hold``, ``provenance``, ...).
  Raises:
    ValueError: no check for ``subject``, an enumeration it does not run, or the
      check's own refusals (configuration, arithmetic, budgets).
  """
  check = kind(subject)
  if enumeration not in check.enumerations:
    raise ValueError(f'enumeration={enumeration!r}; {type(check).__name__} runs '
                     f'{", ".join(check.enumerations)}.')
  return check.check(enumeration, **options)


def verify_and_record(subject, *, enumeration: str, json_path: str = '',
                      report: bool = True, import_seconds: float | None = None,
                      **options) -> dict:
  """``verify``, then (when ``report``: the process that reports) the result as JSON at
  ``json_path`` (atomically, when given) and its summary lines on stdout, closed by the
  run's time split (``time_split``):

      import    process start -> this call (``import_seconds``, from the binary)
      compile   wall seconds in which JAX traced, lowered, compiled or loaded a program
                from the persistent compilation cache (``timing.CompileClock``)
      checks    the rest of ``verify``'s wall time (its compiling excluded)
      write     writing the JSON
  """
  check = kind(subject)
  t = time.time()
  with timing.CompileClock() as clock:
    result = verify(subject, enumeration=enumeration, **options)
  verify_seconds = time.time() - t
  compiling = clock.seconds()
  result['compiling'] = {**{k: round(v, 3) for k, v in compiling.items()}, **clock.counts()}
  split = {'import': import_seconds, 'compile': compiling['total'],
           'checks': verify_seconds - compiling['total']}
  result['time_split'] = {k: None if v is None else round(v, 3) for k, v in split.items()}
  if report:
    t = time.time()
    if json_path:
      outputs.atomic_json(json_path, result, indent=check.json_indent, default=str)
    split['write'] = time.time() - t
    print('\n'.join(check.summary(result) + [_split_line(split, result['compiling'])]))
  return result


def _split_line(split: dict, compiling: dict) -> str:
  parts = [f'{k} {v:.2f} s' for k, v in split.items() if v is not None]
  return (f"  time split: {', '.join(parts)} (compile: trace {compiling['trace']:.2f}, lower "
          f"{compiling['lower']:.2f}, XLA compile or cache load {compiling['compile']:.2f} s; "
          f"{compiling['programs']} programs, {compiling['cache_hits']} persistent-cache hits)")
