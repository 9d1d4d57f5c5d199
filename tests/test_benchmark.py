"""Smoke test of scripts/benchmark.py: a few steps of every configuration, every figure printed."""

import math
import os
import subprocess
import sys
import pytest

pytestmark = pytest.mark.slow  # The whole file: runs the benchmark script.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _figures(output, kind):
  """{name: value} of the `RATIO name value ...` or `METRIC name value ...` lines."""
  figures = {}
  for line in output.splitlines():
    parts = line.split()
    if len(parts) >= 3 and parts[0] == kind:
      figures[parts[1]] = float(parts[2])
  return figures


def _run(*args):
  """scripts/benchmark.py with `args`, on the CPU; the finished process."""
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
  return subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'benchmark.py'), *args],
                        capture_output=True, text=True, env=env, timeout=600, check=False)


def test_quick_benchmark_prints_every_ratio_and_metric():
  result = _run('--quick')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  ratios = _figures(result.stdout, 'RATIO')
  metrics = _figures(result.stdout, 'METRIC')
  expected_ratios = [f'{kind}.{mode}' for kind in ('nothing_on_disk.d_over_a', 'with_disk.b_over_a')
                     for mode in ('k1', 'k1.xla', 'k10', 'k10.xla')] + [
                         'full_stack.b2_over_a.k10', 'full_stack.b2_over_a.k10.xla',
                         'checkpoint_cost.b_over_f.k10',
                         'same_mode_vs_keras_best.c_best_over_b.k10.xla',
                         'defaults_vs_keras_defaults.c_default_over_b.k1',
                         'disk_path.b_over_d.k10', 'disk_path.b_over_d.k10.xla',
                         'keras_best_disk.c_best_disk_over_b_best',
                         'quickstart.q_over_a', 'quickstart.c_over_q',
                         'keras_fit_guarded.g_over_p.k1', 'keras_fit_guarded.g_over_p.k10.xla',
                         'peak_rss.process.d_over_a.k10.xla']
  for name in expected_ratios:
    assert name in ratios and math.isfinite(ratios[name]) and ratios[name] > 0, (name, ratios)
  for name in ('checkpoint_save_ms', 'checkpoint_size_mb', 'fit_call_overhead_ms',
               'rollback_trigger_to_first_applied_step_ms', 'process_peak_rss_mb'):
    assert name in metrics and math.isfinite(metrics[name]), (name, metrics)
  # Every configuration ran exactly its steps (a skip or a stopped run would be named here).
  assert 'SANITY ok' in result.stdout, result.stdout[-3000:]


def test_recorder_section_prints_the_host_cost_of_every_cadence():
  result = _run('--section', 'recorder')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  metrics = _figures(result.stdout, 'METRIC')
  names = ['events_jsonl_record_us.alone', 'events_jsonl_record_us.batched'] + [
      f'recorder_us_per_loop.{case}' for case in (
          'none', 'defaults', 'summary_every_1', 'summary_every_10', 'summary_every_100',
          'log_every_10', 'log_every_100', 'log_every_1000')]
  for name in names:
    assert name in metrics and math.isfinite(metrics[name]) and metrics[name] > 0, (name, metrics)


def test_floor_section_prints_each_layer_above_the_bare_step():
  result = _run('--section', 'floor', '--quick')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  ratios = _figures(result.stdout, 'RATIO')
  names = [f'floor.{kind}.{mode}' for kind in ('norm.n_over_a', 'skip.m_over_a',
                                               'skeleton.e_over_m', 'policies.d_over_e',
                                               'skipping.s_over_m', 'policies.d_over_s',
                                               'total.d_over_a') for mode in ('k10', 'k10.xla')]
  for name in names:
    assert name in ratios and math.isfinite(ratios[name]) and ratios[name] > 0, (name, ratios)
  assert 'SANITY ok' in result.stdout, result.stdout[-3000:]


def test_own_loop_section_prints_every_variant_and_target():
  result = _run('--section', 'own_loop', '--quick')  # The seed MLP, XLA off and on; ~30 s.
  ratios = _figures(result.stdout, 'RATIO')
  metrics = _figures(result.stdout, 'METRIC')
  modes = ('k1', 'k1.xla')
  for mode in modes:
    assert math.isfinite(metrics[f'own_loop.mlp.{mode}.bare_ms']), metrics
  names = [f'own_loop.mlp.{mode}.{kind}' for mode in modes
           for kind in ('guard_over_bare', 'guard_over_lso', 'guard_in_over_bare',
                        'guard_in_over_lso', 'lso_over_bare')]
  targets = [line for line in result.stdout.splitlines() if line.startswith('TARGET ')]
  assert len(targets) == 4 * len(modes), targets
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  for name in names:
    assert name in ratios and math.isfinite(ratios[name]) and ratios[name] > 0, (name, ratios)
  assert 'SANITY ok' in result.stdout, result.stdout[-3000:]
