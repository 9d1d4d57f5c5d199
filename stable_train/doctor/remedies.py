"""The doctor's remedies: for each cause, the fix as concrete as a run's records allow (a gin
line for the Trainer, the same fix as code for a guarded `fit` or an own loop: `in_door`)."""

import re
from typing import Any, Dict, Optional

from stable_train.doctor import course
from stable_train.doctor import symptoms as symptoms_lib
from stable_train.doctor.evidence import DOMAIN_OPS


def remedy(cause: str, s: symptoms_lib.Symptoms, names: Dict[str, str]) -> str:
  """The remedy for `cause`, as concrete as the records allow."""
  lr = symptoms_lib.finite_values((s.history or {}).get('learning_rate', []))
  rate = (s.rollbacks[-1].get('learning_rate') if s.rollbacks and s.status == 'completed' else
          (float(lr[-1]) / 10 if lr.size else None))
  name = names.get('optimizer', 'keras.optimizers.<YourOptimizer>')
  model = names.get('model')
  norm = f'{s.healthy_norm:.3g}' if s.healthy_norm else '1.0'
  op = ((s.forensics or {}).get('op_level') or {})
  where = f" (op {op.get('op_name')}, created at {op.get('source')})" if op.get('found') else ''
  # Layers built in float16, weights and all (a loss scale or not): not mixed precision.
  scaled = s.fp16 != 'unscaled' and not s.half_variables
  return {
      'learning_rate': (f'{name}.learning_rate = {rate:.3g}' if rate else
                        f'lower {name}.learning_rate 10x') + (
                            '  # or warm it up: @WarmupSchedule()' if rate else ''),
      'exploding_gradients': _already_clipped(s, rate, name) or (
                              f'Trainer.policies = [@CheckNumerics(), @ClipByGlobalNorm(), '
                              f'@SkipNonFinite(), @DivergenceCheck(), @Forensics()] and '
                              f'ClipByGlobalNorm.max_norm = {norm}  # the healthy norm' + (
                                  '; a recurrence: if it still diverges clipped, lower the '
                                  + (f'learning rate to {rate:.3g}' if rate else 'rate 10x')
                                  if course.recurrent_sgd_rate(s) else '') + (
                                      f"; the optimizer's own clip ({_clip_text(s)}) did not "
                                      'hold the norm' if s.optimizer_clip else '')),
      'initialisation': ((f'{model}.kernel_initializer = @keras.initializers.HeNormal()  # or '
                          'GlorotUniform' if model else
                          "kernel_initializer='he_normal' (ReLU) or 'glorot_uniform' on every "
                          'Dense/Conv layer, normalisation scales at 1') +
                         ' (the initial outputs should be of the order of the labels)'),
      'division_or_log': (f'guard the op{where}: ' + (
                              'keep its argument inside its domain (acosh: x >= 1, acos and asin: '
                              '|x| <= 1, atanh: |x| < 1), e.g. tf.clip_by_value, or project '
                              'the points that left it back; ' if op.get('op_type') in DOMAIN_OPS
                              else '') + 'tf.math.divide_no_nan(a, b), '
                          'tf.math.log(tf.maximum(p, 1e-7)) or tf.math.xlogy; for a '
                          'classification loss: Trainer.loss = '
                          '@keras.losses.SparseCategoricalCrossentropy(from_logits=True)'),
      'softmax_overflow': _softmax_remedy(op, where),
      'precision': (('' if scaled else "build the model's layers in float32 or under "
                     "'mixed_float16' (float32 weights, a LossScaleOptimizer; an optimizer "
                     'epsilon under 6e-8 is 0 in float16); ') +
                    "train.precision = 'mixed_bfloat16'  # float32's range; or 'float32', or "
                    'rescale the inputs/activations below 65504' + (
                        f", or keep layer {op['layer']} in float32 (dtype='float32'){where}"
                        if op.get('found') and op.get('layer') else '')),
      'bad_input': ('Trainer.policies = [@ValidateInputs(), @CheckNumerics(), @AdaptiveClip(), '
                    '@SkipNonFinite(), @OutlierSkip(), @DivergenceCheck(), @Forensics()]  '
                    '# skip and quarantine bad batches; then fix the data at the batches named'),
      'transient': ('nothing to change in the model: if it recurs, suspect the hardware '
                    '(memory errors) or non-deterministic ops; Forensics(recheck=True) '
                    'keeps telling them apart'),
      'loss_output_mismatch': _mismatch_remedy(s.mismatch or {}),
  }[cause]


def clip_held(s: symptoms_lib.Symptoms) -> bool:
  """Whether the optimizer clipped the gradients' norm itself (`clipnorm`, `global_clipnorm`) at
  no more than 10x the run's healthy norm (or a healthy norm unknown): exploding gradients' cure
  was in place, so the records do not show that a clip would have held the run. A clip of each
  value (`clipvalue`) bounds no norm, and one far above the healthy norm holds nothing."""
  norms = [v for k, v in s.optimizer_clip.items() if k in ('clipnorm', 'global_clipnorm')]
  return bool(norms) and not (s.healthy_norm and min(norms) > 10 * s.healthy_norm)


def _already_clipped(s: symptoms_lib.Symptoms, rate: Optional[float], name: str) -> str:
  """Exploding gradients' remedy where the optimizer's own clip held the norm (`clip_held`): the
  rate is what is left to lower."""
  if not clip_held(s):
    return ''
  return (f'{name}.learning_rate = {rate:.3g}' if rate else f'lower {name}.learning_rate 10x') + (
      f"  # keep the optimizer's own clip ({_clip_text(s)}): it was in place and the run still "
      'diverged')


def _clip_text(s: symptoms_lib.Symptoms) -> str:
  return ', '.join(f'{k}={v:.3g}' for k, v in sorted(s.optimizer_clip.items()))


def in_door(text: str, door: Optional[str]) -> str:
  """A remedy's gin lines as the code a `guard_fit` or own-loop user writes (the Trainer's, and a
  run from before summary.json named its door, keep the gin lines)."""
  if door not in ('guard_fit', 'own_loop'):
    return text
  if '  # or in code: ' in text:  # The mismatch's fix: given as code already.
    return text.split('  # or in code: ', 1)[1]
  clip = re.search(r' and ClipByGlobalNorm\.max_norm = ([\d.e+-]+)', text)
  if clip:
    text = text.replace(clip.group(0), '').replace(
        '@ClipByGlobalNorm()', f'@ClipByGlobalNorm(max_norm={clip.group(1)})')
  text = re.sub(r'Trainer\.policies = \[([^\]]*)\]', lambda m: (
      'stable_train.guard_fit(model, policies=[%s])' if door == 'guard_fit' else
      'stable_train.StepGuard(model, optimizer, policies=[%s])') % m.group(1), text)
  text = re.sub(r'Trainer\.loss = @([\w.]+)\(([^)]*)\)', r'model.compile(loss=\1(\2))', text)
  text = re.sub(r"train\.precision = '(\w+)'", r"keras.mixed_precision.set_global_policy('\1')",
                text)
  text = re.sub(r'(keras\.optimizers\.[\w<>]+)\.learning_rate = ([\d.e+-]+)',
                r'\1(learning_rate=\2)', text)
  return text.replace('@sparse_softmax_cross_entropy',
                      'stable_train.core.losses.sparse_softmax_cross_entropy'
                      ).replace('@', 'stable_train.')


def _softmax_remedy(op: Dict[str, Any], where: str) -> str:
  """An overflowed exp: the loss from logits; a division or log over a sum of exps (`operand`):
  TensorFlow's own ops; a softmax op (it subtracts the maximum), or no op located: a row masked
  to -inf everywhere first (alone where Forensics stopped at a -inf constant: its line)."""
  logits = ('Trainer.loss = @keras.losses.SparseCategoricalCrossentropy(from_logits=True)  '
            '# or @sparse_softmax_cross_entropy: the loss from logits, never '
            f'exp(x) / sum(exp(x)){where}')
  fill = op.get('constant') == '-Inf'
  masked = ('mask scores with a large finite negative (-1e9, -3e4 in float16, as '
            'keras.layers.Softmax and MultiHeadAttention do), never -inf, so a fully masked row '
            '(an empty sequence) stays finite' +
            (f" (the -inf constant at {op.get('source')})" if fill else where))
  if op.get('operand'):
    return ('tf.nn.softmax, tf.nn.log_softmax, tf.reduce_logsumexp or tf.math.cumulative_'
            f'logsumexp for exp() over its sum (they subtract the maximum){where}; for a '
            f'classification loss: {logits.split(" # ")[0].strip()}')
  if op.get('found') and op.get('op_type') not in ('Softmax', 'LogSoftmax'):
    return logits
  return masked if fill else f'{masked}; for a softmax written by hand: {logits}'


def _mismatch_remedy(found: Dict[str, Any]) -> str:
  """The start check's fix: its gin bindings (one line here) and the fix in code."""
  gin = '; '.join(line for line in str(found.get('gin') or '').splitlines() if line.strip())
  fix = found.get('fix') or ('a cross-entropy whose from_logits matches the last layer: logits '
                             'and from_logits=True, or probabilities and from_logits=False')
  return f'{gin}  # or in code: {fix}' if gin and not gin.startswith('#') else fix
