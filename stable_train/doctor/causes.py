"""The doctor's rules: the causes it can name (`CAUSES`) and the points each symptom gives each of
them (`score`), with the evidence in words. Pure functions of `symptoms.Symptoms`."""

import math
from typing import Dict, List, Tuple

from stable_train.doctor import course
from stable_train.doctor.evidence import (CAUSES, DIV_LOG_OPS, EXP_OPS, EXP_OVERFLOW, FLOAT16_MAX,
                                          PRODUCT_OPS, REDUCTION_OPS, SQUARE_OVERFLOW,
                                          SUM_OVERFLOW, Scores, name_the_op)
from stable_train.doctor.symptoms import MISMATCH, Symptoms, number

__all__ = ['CAUSES', 'score', 'scores_and_decisive']


def score(s: Symptoms) -> Dict[str, Tuple[float, List[str]]]:
  """Each cause's score and the evidence for it, each symptom worth some points."""
  return scores_and_decisive(s)[0]


def scores_and_decisive(s: Symptoms):
  """(`score`'s result, the set of causes with decisive evidence)."""
  out = Scores()
  for rules in (_input_rules, _transient_rules, _arithmetic_rules, _precision_rules,
                course.start_rules, course.rate_rules, course.gradient_rules,
                course.recurrence_rules, _mismatch_rules):
    rules(s, out)
  return {c: (v[0], v[1]) for c, v in out.found.items()}, out.decisive


def _loss_only(s: Symptoms) -> int:
  """Faulty steps whose loss was non-finite from finite model outputs (none known when the
  step did not see the outputs)."""
  if not s.outputs_checked:
    return 0
  kinds = s.fault_kinds()
  return (len(s.faults) - s.outputs_non_finite() - kinds.get('input', 0)
          - kinds.get('gradient', 0))


def _input_rules(s: Symptoms, out: Scores) -> None:
  kinds = s.fault_kinds()
  if kinds.get('input'):
    out.add('bad_input', 5, f"{kinds['input']} batches failed an input check (NaN/Inf or out of "
                            'range)', decisive=True)
  if s.input_bad():
    out.add('bad_input', 5, 'the faulty batch saved by forensics holds NaN/Inf values',
            decisive=True)
  if 'data' in s.checks and not s.collapsed:  # A dead net's first batch proves nothing.
    out.add('bad_input', 4, 'the loss went far above its best, but the model did as well as '
                            'before on a clean batch: the batches changed, not the model (bad '
                            'rows, or unshuffled data that differs from its start)')
  if s.outlier_batches or s.vetoes:
    out.add('bad_input', 4, f'{len(s.outlier_batches) or s.vetoes} batches skipped as outliers '
                            "(loss or gradient norm far above the run's own)")
  if s.sporadic() and s.outputs_non_finite() and not s.rechecks and not s.inputs_checked:
    out.add('bad_input', 3, f'{len(s.faults)} scattered steps whose model outputs were already '
                            'non-finite, the run healthy between them: bad batches are the '
                            'likeliest source (add ValidateInputs() to check the inputs)')
  if 'loss_spike' in s.triggers:
    out.add('bad_input', 1, 'a loss spike triggered a rollback')
  if 'bad_input' in s.warnings:  # The start check's: a missing-value code among the labels.
    out.add('bad_input', 6, "at the start, the labels held a missing-value code (-999, say) far "
                            'outside the others, read as a value (the warning names it)',
            decisive=True)
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


def _transient_rules(s: Symptoms, out: Scores) -> None:
  transient = s.rechecks.count('transient')
  if transient and 'deterministic' not in s.rechecks:
    out.add('transient', 6, f'{transient} faulty step(s) re-run on the same batch and state were '
                            'finite: not reproducible', decisive=True)
  elif 'transient_record' in s.rechecks:  # Not decisive: a random draw re-drawn reads the same.
    out.add('transient', 4, "the run's one faulty step, re-run by its forensics record on the "
                            'same batch and state, was finite: not reproducible (a random draw '
                            'in the model that failed once would read the same)')
  loss_growth, norm_growth, _ = s.growth()
  calm = (not s.fault_kinds().get('input') and not s.rechecks and not s.input_bad()
          and norm_growth < 10 and loss_growth < 10)
  quiet = calm and s.isolated()
  # The loss's arithmetic on some batches, as deterministic as their labels (a count that can be
  # 0, a log of 0): a few isolated steps, or a small share in short stretches (sporadic).
  if (calm and (s.isolated() or s.sporadic()) and s.faults
      and _loss_only(s) == len(s.faults)):
    out.add('division_or_log', 2.5, f'{len(s.faults)} scattered step(s) with a non-finite loss '
                                    'from finite model outputs, the run healthy between them'
                                    ": the loss's arithmetic on those batches (a division "
                                    f'by a count that can be 0, a log of 0; '
                                    f'{name_the_op(s.forensics)})')
    out.add('transient', 1, 'scattered non-finite steps, the run healthy between them')
  elif quiet and s.outputs_non_finite() == 0:
    out.add('transient', 3, f'{len(s.faults)} isolated non-finite step(s) with finite model '
                            'outputs, the run healthy before and after')
  elif quiet and s.inputs_checked and len(s.faults) == 1:  # A one-off in the forward pass; a
    # recurring one is the arithmetic some batches meet (a fully masked row).
    out.add('transient', 2.5, 'one non-finite step from inputs that passed the finiteness check, '
                              'the run healthy before and after')


def _arithmetic_rules(s: Symptoms, out: Scores) -> None:
  op = s.op_type()
  # The op that made the first NaN/Inf outranks the norm history; one computed in float16 is
  # first the float16 range's (_precision_rules), its kind only second.
  located, settles = (5, False) if s.op_in_half() else (8, True)
  # A division or log over a sum of exps (forensics' `operand`): a softmax or logsumexp by hand
  # whose exps underflowed to a 0 the op met. Its kind says division/log, its operand the softmax
  # (whose remedy cures both): the softmax first, not decisive.
  if op in DIV_LOG_OPS and s.forensics['op_level'].get('operand'):
    out.add('softmax_overflow', located, f'forensics: the first NaN/Inf came out of a {op} op '
                                         f'({s.op_name()}) over a sum of exp(): a softmax or '
                                         'logsumexp written by hand, with no maximum '
                                         'subtracted')
    out.add('division_or_log', located - 4, f'the {op} op met a 0 its exps underflowed to')
  elif op in DIV_LOG_OPS:
    out.add('division_or_log', located, f'forensics: the first NaN/Inf came out of a {op} op '
                                        f'({s.op_name()})', decisive=settles)
  if op in EXP_OPS:
    out.add('softmax_overflow', located, f'forensics: the first NaN/Inf came out of a {op} op '
                                         f'({s.op_name()})', decisive=settles)
  outputs = s.outputs_non_finite()
  if (s.inputs_checked and not op and outputs >= max(1, 0.5 * len(s.faults))
      and (not s.fp16 or s.inf_fill())):  # In float16, an overflow looks the same, unless an
    # infinity built on purpose came first.
    out.add('softmax_overflow', 2, f'{outputs} step(s) whose model outputs were non-finite from '
                                   'inputs that passed the finiteness check: the forward pass '
                                   '(a softmax over a fully masked row, -inf everywhere; an exp '
                                   f'that overflows); {name_the_op(s.forensics)}')
    out.add('division_or_log', 1.5, 'non-finite outputs from finite inputs can be a division or '
                                    'a log in the forward pass')
  _mask_rules(s, out)
  acts = s.activations()
  top = number(acts[-1].get('max_abs')) if acts else math.nan
  if not math.isfinite(top) and s.output_max is not None:
    top = s.output_max  # The start check's, when forensics has no activations.
  loss_only = _loss_only(s)
  # Outputs (forensics' last layer) whose own square overflows float32 make any loss non-finite:
  # no exp() and no division needed, the model grew without bound.
  huge = bool(acts) and (top >= SQUARE_OVERFLOW or (
      top >= SUM_OVERFLOW and op in REDUCTION_OPS and s.op_in_loss()))
  if huge and loss_only:
    out.add('exploding_gradients', 2, f"the model's outputs reached {top:.3g}, beyond what any "
                                      'product in the loss survives in float32: its weights or '
                                      'activations grew without bound')
  if top > EXP_OVERFLOW and loss_only and not huge:
    out.add('softmax_overflow', 2, f"the model's outputs reach {top:.3g}: exp() of them "
                                   'overflows float32 (above 88.7)')
  if op in PRODUCT_OPS and loss_only and not s.fp16 and s.op_in_loss() and not huge:
    out.add('softmax_overflow', 3, f"forensics: the first NaN/Inf came out of a {op} in the "
                                   f"loss ({s.op_name()}), from finite outputs: a product that "
                                   'overflows float32, typically exp() terms multiplied (work in '
                                   'log space: logsumexp)')
  recurring = s.persistent() or (len(s.faults) > 3 and not s.sporadic())
  if (recurring and loss_only >= 0.8 * len(s.faults) and op not in EXP_OPS + DIV_LOG_OPS
      and not huge):
    out.add('division_or_log', 2, f'{len(s.faults)} steps with a non-finite loss from finite '
                                  f'model outputs: the loss function '
                                  f'({name_the_op(s.forensics)})')
    out.add('softmax_overflow', 1.5, 'a non-finite loss from finite outputs can be an exp() in '
                                     'the loss')


def _mask_rules(s: Symptoms, out: Scores) -> None:
  """A softmax over a row masked everywhere (-inf in every score), from what Forensics saw."""
  op = s.op_type()
  acts = s.activations()
  # NaN in a layer's outputs that a later layer dropped (the model's output finite): rows the
  # model masks out, where a softmax over a fully masked row (-inf everywhere) is NaN; a select
  # passes the forward pass, never the gradient.
  dropped = [a['layer'] for a in acts[:-1] if a.get('finite') is False]
  if (dropped and acts[-1].get('finite') is not False and not op and not s.fp16
      and not s.outputs_non_finite() and not s.input_bad() and not s.fault_kinds().get('input')):
    out.add('softmax_overflow', 4, f"forensics: layer {dropped[0]}'s outputs held NaN/Inf that a "
                                   "later layer dropped before the model's (finite) output: rows "
                                   'masked out later, as a softmax over a fully masked row (-inf '
                                   'everywhere) makes; its gradient stays NaN')


def _precision_rules(s: Symptoms, out: Scores) -> None:
  if not s.fp16 or s.input_bad():
    return  # NaN in the batch forensics saved makes float16 activations non-finite as float32.
  half = [a for a in s.activations()
          if 'float16' in a.get('dtype', '') and 'bfloat16' not in a['dtype']]
  # A division or a log located in float16 is either float16's range (an epsilon below 6e-8 is
  # 0 there) or a real 0 that float32 would not survive either: the non-finite activations
  # after it tell neither, and the op's dtype alone decides nothing.
  # Nor does a non-finite activation where forensics stopped at an infinity built on purpose (a
  # -inf mask fill is -inf in float32 too); finite values near 65504 still tell.
  ambiguous = s.op_type() in DIV_LOG_OPS or s.inf_fill()
  hot = [a['layer'] for a in half if number(a.get('max_abs')) > 0.5 * FLOAT16_MAX or (
      not a['finite'] and not ambiguous)]
  if hot:
    out.add('precision', 5, f"float16 activations overflow (layer {hot[0]}): above float16's "
                            '65504', decisive=True)
  if s.op_in_half():
    out.add('precision', 6, f'forensics: the first NaN/Inf came out of a float16 {s.op_type()} '
                            f"({s.op_name()}): float16's range (largest 65504; an epsilon below "
                            '6e-8 is 0) -- compute that layer in float32', decisive=not ambiguous)
  if s.faults and not s.input_bad() and not s.fault_kinds().get('input') and (
      s.persistent() or len(s.faults) > 3) and not s.op_type() in EXP_OPS + DIV_LOG_OPS and (
          not s.inf_fill()):
    out.add('precision', 3, f'{len(s.faults)} non-finite steps under float16 compute from finite '
                            'inputs, with no op that would overflow in float32')
  if s.overflow_skips > 20:
    out.add('precision', 1, f'{s.overflow_skips} float16 loss-scale overflows')
  if s.half_variables and (s.faults or s.triggers):  # At a usual rate, more than the rate;
    # beside a division or log located (a real 0 leaves the same record), less than it.
    strong = s.usual_rate() and s.op_type() not in DIV_LOG_OPS
    out.add('precision', 6 if strong else 3, "the model's weights are float16 (not "
            "mixed precision's float32): an update under 1/2048 of a weight is lost and an "
            'optimizer epsilon under 6e-8 is 0')


def _mismatch_rules(s: Symptoms, out: Scores) -> None:
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
                         f'op ({s.op_name()}), fed the outputs the loss does not fit',
            decisive=True)
  if not s.faults:
    out.add(MISMATCH, 3, 'no step was non-finite: a finite loss that the mismatch keeps from '
                         'training, not an overflow')
  stopped = [t for t in s.triggers
             if t in ('divergence', 'stalled', 'untrainable_start', 'no_progress',
                      'constant_outputs', 'chance_level', 'mean_level', 'flat_answers')]
  if stopped and not s.faults:
    out.add(MISMATCH, 3, f'the loss did not come down ({stopped[0]}) with that loss')
