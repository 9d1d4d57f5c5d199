"""The doctor's rules: the causes it can name (`CAUSES`) and the points each symptom gives each of
them (`score`), with the evidence in words. Pure functions of `symptoms.Symptoms`."""

import math
from typing import Dict, List, Tuple

from stable_train.doctor.symptoms import MISMATCH, Symptoms, number

CAUSES = {
    'exploding_gradients': 'exploding gradients',
    'learning_rate': 'learning rate too high',
    'initialisation': 'bad initialisation',
    'division_or_log': 'division by zero / log(0)',
    'softmax_overflow': 'softmax/exp overflow',
    'precision': 'float precision',
    'bad_input': 'bad input',
    'transient': 'transient / not reproducible',
    'loss_output_mismatch': 'loss/output mismatch',
}
# The op types whose NaN/Inf output names a cause (forensics' op-level provenance).
# Ops of the backward pass count too: SqrtGrad is 0.5 / sqrt(x), infinite at 0.
EXP_OPS = ('Exp', 'Expm1', 'Softmax', 'LogSoftmax', 'Softplus', 'Sinh', 'Cosh')
DIV_LOG_OPS = ('Log', 'Log1p', 'Xlogy', 'Xlog1py', 'Xdivy', 'RealDiv', 'Div', 'DivNoNan',
               'FloorDiv', 'Reciprocal', 'Inv', 'Rsqrt', 'Sqrt', 'Pow', 'SqrtGrad', 'RsqrtGrad',
               'ReciprocalGrad', 'InvGrad', 'Digamma', 'Lgamma', 'Atanh', 'Acos', 'Asin')
# Products: a first Inf born in one of these, from finite operands, is an overflow.
PRODUCT_OPS = ('Mul', 'MatMul', 'BatchMatMul', 'BatchMatMulV2', 'BatchMatMulV3', 'Prod', 'Square',
               'Einsum', 'Cumprod')
FLOAT16_MAX = 65504.0
EXP_OVERFLOW = 88.7  # exp(x) overflows float32 above this.
OUTPUT_RATIO = 30.0  # Outputs this many times the labels' scale: the initial weights (as
# DivergenceCheck's start check).
# Initial kernels whose RMS is this many times LeCun's sqrt(1 / fan_in) or more are off the
# standard scale (policies/weight_scale.py): He's is 1.41 times it, Glorot's at most that.
KERNEL_OFF_SCALE = 3.0
# A finite gradient norm this many times the run's median one: a cliff (exploding gradients). A
# rate too high raises the norm with the loss by tens to thousands; a cliff is far beyond.
CLIFF = 1e4


class _Scores:
  """Points and evidence per cause, filled by the rule groups below; `decisive` names the causes
  with evidence that settles the question by itself (the op forensics located, batches that
  failed an input check, a re-run that was finite, ...): only they may be named with high
  confidence."""

  def __init__(self):
    self.found = {c: [0.0, []] for c in CAUSES}
    self.decisive = set()

  def add(self, cause: str, points: float, evidence: str, decisive: bool = False) -> None:
    self.found[cause][0] += points
    self.found[cause][1].append(evidence)
    if decisive:
      self.decisive.add(cause)


def score(s: Symptoms) -> Dict[str, Tuple[float, List[str]]]:
  """Each cause's score and the evidence for it, each symptom worth some points."""
  return scores_and_decisive(s)[0]


def scores_and_decisive(s: Symptoms):
  """(`score`'s result, the set of causes with decisive evidence)."""
  out = _Scores()
  for rules in (_input_rules, _transient_rules, _arithmetic_rules, _precision_rules, _start_rules,
                _rate_rules, _gradient_rules, _mismatch_rules):
    rules(s, out)
  return {c: (v[0], v[1]) for c, v in out.found.items()}, out.decisive


def _op(s: Symptoms) -> str:
  return ((s.forensics or {}).get('op_level') or {}).get('op_name') or '?'


def _loss_only(s: Symptoms) -> int:
  """Faulty steps whose loss was non-finite from finite model outputs (none known when the
  step did not see the outputs)."""
  if not s.outputs_checked:
    return 0
  kinds = s.fault_kinds()
  return (len(s.faults) - s.outputs_non_finite() - kinds.get('input', 0)
          - kinds.get('gradient', 0))


def _input_rules(s: Symptoms, out: _Scores) -> None:
  kinds = s.fault_kinds()
  if kinds.get('input'):
    out.add('bad_input', 5, f"{kinds['input']} batches failed an input check (NaN/Inf or out of "
                            'range)', decisive=True)
  if s.input_bad():
    out.add('bad_input', 5, 'the faulty batch saved by forensics holds NaN/Inf values',
            decisive=True)
  if 'data' in s.checks and not s.collapsed:  # A dead net's first batch proves nothing.
    out.add('bad_input', 4, 'the loss went far above its best, but the model did as well as '
                            'before on a clean batch: the batches were bad, not the model')
  if s.outlier_batches or s.vetoes:
    out.add('bad_input', 4, f'{len(s.outlier_batches) or s.vetoes} batches skipped as outliers '
                            "(loss or gradient norm far above the run's own)")
  if s.sporadic() and s.outputs_non_finite() and not s.rechecks and not s.inputs_checked:
    out.add('bad_input', 3, f'{len(s.faults)} scattered steps whose model outputs were already '
                            'non-finite, the run healthy between them: bad batches are the '
                            'likeliest source (add ValidateInputs() to check the inputs)')
  if 'loss_spike' in s.triggers:
    out.add('bad_input', 1, 'a loss spike triggered a rollback')
  first = min(s.faults, key=lambda f: f['step']) if s.faults else None
  loss_growth, norm_growth, _ = s.growth()
  if (first is not None and 'model outputs already non-finite' in (first.get('tensor') or '')
      and not s.fp16 and _healthy_steps(s) >= 8 and loss_growth < 3 and norm_growth < 3
      and not s.inputs_checked):
    out.add('bad_input', 3, f"the model's outputs turned non-finite at step {first['step']} "
                            'from the weights that gave finite ones a step before, neither the '
                            'loss nor the gradient norm growing: the batch changed, not the '
                            'model (add ValidateInputs() to check the inputs)')


def _healthy_steps(s: Symptoms) -> int:
  """Applied steps with a finite loss in the history before the trouble."""
  h = s.history or {}
  return sum(1 for loss, applied in zip(h.get('loss', []), h.get('applied', []))
             if applied and math.isfinite(number(loss)))


def _transient_rules(s: Symptoms, out: _Scores) -> None:
  transient = s.rechecks.count('transient')
  if transient and 'deterministic' not in s.rechecks:
    out.add('transient', 6, f'{transient} faulty step(s) re-run on the same batch and state were '
                            'finite: not reproducible', decisive=True)
  loss_growth, norm_growth, _ = s.growth()
  quiet = (s.isolated() and not s.fault_kinds().get('input') and not s.rechecks
           and not s.input_bad() and norm_growth < 10 and loss_growth < 10)
  if quiet and s.faults and _loss_only(s) == len(s.faults):  # The loss's arithmetic on those
    # batches, as deterministic as their labels: a count that can be 0, a log of 0.
    out.add('division_or_log', 2.5, f'{len(s.faults)} isolated step(s) with a non-finite loss '
                                    'from finite model outputs, the run healthy before and '
                                    "after: the loss's arithmetic on those batches (a division "
                                    'by a count that can be 0, a log of 0; add Forensics() to '
                                    'name the op)')
    out.add('transient', 1, 'isolated non-finite steps, the run healthy before and after')
  elif quiet and s.outputs_non_finite() == 0:
    out.add('transient', 3, f'{len(s.faults)} isolated non-finite step(s) with finite model '
                            'outputs, the run healthy before and after')
  elif quiet and s.inputs_checked and len(s.faults) == 1:  # A one-off in the forward pass; a
    # recurring one is the arithmetic some batches meet (a fully masked row).
    out.add('transient', 2.5, 'one non-finite step from inputs that passed the finiteness check, '
                              'the run healthy before and after')


def _arithmetic_rules(s: Symptoms, out: _Scores) -> None:
  op = s.op_type()
  # The op that made the first NaN/Inf outranks the norm history; one computed in float16 is
  # first the float16 range's (_precision_rules), its kind only second.
  located, settles = (5, False) if s.op_in_half() else (8, True)
  if op in DIV_LOG_OPS:
    out.add('division_or_log', located, f'forensics: the first NaN/Inf came out of a {op} op '
                                        f'({_op(s)})', decisive=settles)
  if op in EXP_OPS:
    out.add('softmax_overflow', located, f'forensics: the first NaN/Inf came out of a {op} op '
                                         f'({_op(s)})', decisive=settles)
  outputs = s.outputs_non_finite()
  if s.inputs_checked and not op and outputs >= max(1, 0.5 * len(s.faults)) and not s.fp16:
    out.add('softmax_overflow', 2, f'{outputs} step(s) whose model outputs were non-finite from '
                                   'inputs that passed the finiteness check: the forward pass '
                                   '(a softmax over a fully masked row, -inf everywhere; an exp '
                                   'that overflows); add Forensics() to name the op')
    out.add('division_or_log', 1.5, 'non-finite outputs from finite inputs can be a division or '
                                    'a log in the forward pass')
  acts = s.activations()
  top = number(acts[-1].get('max_abs')) if acts else math.nan
  if not math.isfinite(top) and s.output_max is not None:
    top = s.output_max  # The start check's, when forensics has no activations.
  loss_only = _loss_only(s)
  if top > EXP_OVERFLOW and loss_only:
    out.add('softmax_overflow', 2, f"the model's outputs reach {top:.3g}: exp() of them "
                                   'overflows float32 (above 88.7)')
  if op in PRODUCT_OPS and loss_only and not s.fp16 and s.op_in_loss():
    out.add('softmax_overflow', 3, f"forensics: the first NaN/Inf came out of a {op} in the "
                                   f"loss ({_op(s)}), from finite outputs: a product that "
                                   'overflows float32, typically exp() terms multiplied (work in '
                                   'log space: logsumexp)')
  recurring = s.persistent() or (len(s.faults) > 3 and not s.sporadic())
  if recurring and loss_only >= 0.8 * len(s.faults) and op not in EXP_OPS + DIV_LOG_OPS:
    out.add('division_or_log', 2, f'{len(s.faults)} steps with a non-finite loss from finite '
                                  'model outputs: the loss function (add Forensics() to name '
                                  'the op)')
    out.add('softmax_overflow', 1.5, 'a non-finite loss from finite outputs can be an exp() in '
                                     'the loss')


def _precision_rules(s: Symptoms, out: _Scores) -> None:
  if not s.fp16:
    return
  half = [a for a in s.activations()
          if 'float16' in a.get('dtype', '') and 'bfloat16' not in a['dtype']]
  # A division or a log located in float16 is either float16's range (an epsilon below 6e-8 is
  # 0 there) or a real 0 that float32 would not survive either: the non-finite activations
  # after it tell neither, and the op's dtype alone decides nothing.
  ambiguous = s.op_type() in DIV_LOG_OPS
  hot = [a['layer'] for a in half if number(a.get('max_abs')) > 0.5 * FLOAT16_MAX or (
      not a['finite'] and not ambiguous)]
  if hot:
    out.add('precision', 5, f"float16 activations overflow (layer {hot[0]}): above float16's "
                            '65504', decisive=True)
  if s.op_in_half():
    out.add('precision', 6, f'forensics: the first NaN/Inf came out of a float16 {s.op_type()} '
                            f"({_op(s)}): float16's range (largest 65504; an epsilon below 6e-8 "
                            'is 0) -- compute that layer in float32', decisive=not ambiguous)
  if s.faults and not s.input_bad() and not s.fault_kinds().get('input') and (
      s.persistent() or len(s.faults) > 3) and not s.op_type() in EXP_OPS + DIV_LOG_OPS:
    out.add('precision', 3, f'{len(s.faults)} non-finite steps under float16 compute from finite '
                            'inputs, with no op that would overflow in float32')
  if s.overflow_skips > 20:
    out.add('precision', 1, f'{s.overflow_skips} float16 loss-scale overflows')


def _start_rules(s: Symptoms, out: _Scores) -> None:
  inputs_large = s.input_rms is not None and s.input_rms > 10  # NaN compares False.
  explained = s.mismatch is not None  # A loss that does not fit the outputs starts off scale.
  # Outputs far off the labels' scale are the weights'; a loss far above a uniform guess's from
  # outputs in range may be the loss's (a softmax over one unit that no check could read).
  off_scale = s.output_ratio is not None and s.output_ratio > OUTPUT_RATIO
  # Outputs off scale from kernels at a standard scale come from the forward computation (a sum
  # over an unnormalised adjacency, a division by a small temperature): no decisive evidence.
  sound = s.kernel_ratio is not None and s.kernel_ratio < KERNEL_OFF_SCALE
  if 'untrainable_start' in s.triggers:
    out.add('initialisation', 1 if explained else 5, 'the loss never came down from a start '
            'whose outputs or loss were far off scale',
            decisive=off_scale and not explained and not sound)
  if 'constant_outputs' in s.triggers:
    out.add('initialisation', 4, 'at the end the outputs were the same for every example while '
                                 'the labels were not: nothing of the input reached them (weights '
                                 'initialised to zeros or one constant keep every unit alike)')
  if off_scale:
    if inputs_large:  # Unscaled inputs make huge outputs from sound weights.
      out.add('bad_input', 1, f'the inputs are not normalised (RMS {s.input_rms:.3g}), so the '
                              f"outputs start at {s.output_ratio:.3g}x the labels' scale")
    elif sound:  # The architecture amplifies (depth without normalisation, a sum over many
      # inputs): its gradients are amplified alike; another initialiser would not change it.
      out.add('exploding_gradients', 2, f"the model's outputs at the start were "
                                        f"{s.output_ratio:.3g}x the labels' scale from kernels "
                                        f"at {s.kernel_ratio:.3g}x LeCun's scale: the forward "
                                        'pass amplifies the signal, and its gradients with it')
      out.add('initialisation', 1, 'outputs far off scale at the start (from sound kernels)')
    else:
      out.add('initialisation', 4, f"the model's outputs at the start were "
                                   f"{s.output_ratio:.3g}x the labels' scale", decisive=True)
  if 'initialisation' in s.warnings and not inputs_large and not explained:
    out.add('initialisation', 3, 'a warning at the start: outputs or a loss far off scale '
                                 '(DivergenceCheck, InitialisationCheck)')


def _rate_rules(s: Symptoms, out: _Scores) -> None:
  loss_growth, norm_growth, _ = s.growth()
  diverged = [t for t in s.triggers if t in ('divergence', 'stalled')]
  if diverged and 'data' not in s.checks:
    out.add('learning_rate', 4, 'the training loss diverged while finite and the model got worse '
                                'on a clean batch')
  if 'stalled' in s.triggers:
    out.add('learning_rate', 2, 'after a rollback to the start the loss did not come down at the '
                                'backed-off rate')
  # Trained after the last rollback: a fit whose last read rolled back ended at its target.
  if (s.rollbacks and diverged and s.status == 'completed'
      and s.global_step > int(s.rollbacks[-1].get('to_step') or 0)):
    out.add('learning_rate', 3, 'the run trained once Rollback had backed the rate off to '
                                f"{s.rollbacks[-1].get('learning_rate'):.3g}", decisive=True)
  if 'chance_level' in s.triggers:
    out.add('learning_rate', 2, 'at the end the loss was no better than a uniform guess: a '
                                'learning rate too high knocks a network to that level, one too '
                                'low never leaves it')
  if s.collapsed:
    out.add('learning_rate', 4, "the model's outputs became the same for every example where "
                                "an untrained model's were not: its units died, typically of a "
                                'learning rate too high')
  if loss_growth >= 10 and norm_growth >= 3 and s.cliff()[0] < CLIFF:  # A cliff explains it.
    out.add('learning_rate', 2, f'before the trouble the loss grew {loss_growth:.3g}x and the '
                                f'gradient norm {norm_growth:.3g}x together')
  began = s.trouble_began
  if s.faults and began is not None and began == s.first_step:
    return  # Non-finite before any update: no learning rate has acted yet.
  if (diverged or (s.faults and not s.sporadic())) and began is not None and began <= max(
      50, 0.05 * s.num_steps) and not s.input_bad() and 'untrainable_start' not in s.triggers:
    out.add('learning_rate', 1, f'the trouble began early (step {began})')
  if s.lr_rise() > 1.5:
    out.add('learning_rate', 2, f'the learning rate had risen {s.lr_rise():.3g}x just before')
  if 'learning_rate_or_initialisation' in s.warnings:
    out.add('learning_rate', 1, 'InitialisationCheck: the loss stayed far above its start')


def _gradient_rules(s: Symptoms, out: _Scores) -> None:
  loss_growth, norm_growth, jump = s.growth()
  gradient = s.fault_kinds().get('gradient', 0)
  grew = norm_growth >= 100 and loss_growth < 3
  rose = grew or norm_growth >= 10 or (jump >= 10 and loss_growth < 3)
  # A located op explains a non-finite gradient; without growth before it, it is no explosion.
  if gradient and 'transient' not in s.rechecks and s.op_type() is None:
    if rose:
      out.add('exploding_gradients', 4, f'{gradient} step(s) with non-finite gradients from a '
                                        'finite loss and finite outputs, after the gradient norm '
                                        'grew: the backward pass overflowed')
    elif (gradient > 1 or s.persistent()) and gradient >= 0.5 * len(s.faults):  # The pattern
      # of the run, not a few steps beside non-finite outputs (those are the forward pass's).
      out.add('division_or_log', 3, f'{gradient} step(s) with non-finite gradients from a finite '
                                    'loss and outputs, the gradient norm steady before them '
                                    f'({norm_growth:.2g}x): no explosion but a derivative that is '
                                    'infinite at a point (sqrt(0), a log or division behind '
                                    'tf.where); add Forensics() to name the op')
  if grew:
    out.add('exploding_gradients', 3, f'the gradient norm grew {norm_growth:.3g}x before the '
                                      f'trouble while the loss stayed within {loss_growth:.2g}x',
            decisive=True)
  elif jump >= 10 and loss_growth < 3:
    out.add('exploding_gradients', 2, f'the gradient norm jumped {jump:.3g}x in one step while '
                                      'the loss did not')
  cliff, at = s.cliff()
  if cliff >= CLIFF and s.op_type() is None:
    out.add('exploding_gradients', 6, f'the gradient norm reached {cliff:.3g}x its median in one '
                                      f'step (step {at}): a cliff, where the backward pass '
                                      'multiplies through a recurrence or a deep path')
  if 'grad_norm_spike' in s.triggers:
    out.add('exploding_gradients', 1, 'a gradient-norm spike triggered a rollback')


def _mismatch_rules(s: Symptoms, out: _Scores) -> None:
  """The start's loss/output mismatch warning: a loss that cannot train the outputs it gets
  leaves a finite loss slow, stalled or diverging; it weighs less than an op that forensics saw
  make a NaN (8 points) in a layer, more than one in the loss it feeds, and non-finite steps are
  another matter."""
  found = s.mismatch
  if found is None:
    return
  out.add(MISMATCH, 4, f"at the start the loss did not fit the model's outputs "
                       f"({found.get('kind')}): {found.get('message')}", decisive=True)
  if s.op_in_loss():  # The loss's own arithmetic (a log of a negative rate) on those outputs.
    out.add(MISMATCH, 5, f"forensics: the first NaN/Inf came out of the loss's {s.op_type()} "
                         f'op ({_op(s)}), fed the outputs the loss does not fit', decisive=True)
  if not s.faults:
    out.add(MISMATCH, 3, 'no step was non-finite: a finite loss that the mismatch keeps from '
                         'training, not an overflow')
  stopped = [t for t in s.triggers
             if t in ('divergence', 'stalled', 'untrainable_start', 'no_progress',
                      'constant_outputs', 'chance_level')]
  if stopped and not s.faults:
    out.add(MISMATCH, 3, f'the loss did not come down ({stopped[0]}) with that loss')
