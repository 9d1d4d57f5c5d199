"""The doctor's rules on the training's course: the start (outputs and kernels off scale), the
rate (a loss that diverged while finite, a collapse, a warm-up) and the gradient norm's history
(growth, jumps, cliffs, a blow-up at a usual rate, a breakdown at a modest one). Pure functions
of `symptoms.Symptoms`, adding to `evidence.Scores`."""

import math
from typing import Optional

import numpy as np

from stable_train.doctor.evidence import (CLIFF, KERNEL_OFF_SCALE, OUTPUT_RATIO, PRODUCT_OPS,
                                          Scores, name_the_op)
from stable_train.doctor.symptoms import BLOWUP, INPUTS_LARGE, USUAL_RATE, Symptoms, numbers

# A rate at most this share of the usual top for its optimizer is modest (SGD 0.025, Adam 1.25e-3).
MODEST = 0.25
SUMMED = 100.0  # A first loss this many times a mean's at the outputs' and labels' scale sums.
FIRST_UPDATES = 5  # The norms up to this step, from a start off scale, are that start's.
# Recurrent nets' recipes run plain SGD at up to 0.7-1.0 with their gradients clipped
# (Sutskever et al. 2014's sequence-to-sequence at 0.7, Zaremba et al. 2014's LSTM language
# model at 1.0): up to 0.7 a recurrence that diverges needs its gradients clipped more than a
# lower rate (in plain Keras, of 24 recurrent set-ups that failed at 0.2-0.5, a clip at 1.0 at
# the same rate trained 19, a tenth of the rate 15, only the tenth 1); at 1.0, 5 of 31 failures
# (a reviewer's small regressions) only a lower rate trained.
RECURRENT_SGD_TOP = 0.7
# Word and character language models (a recurrence over tokens looked up in an Embedding table,
# summary.json's `embedded`) run plain SGD far
# higher, with a tight clip: PyTorch's word-language-model example at 20 and AWD-LSTM at 30, each
# clipped at 0.25. Of the registry's recurrent runs under SGD above 0.7, the four over a table
# (20-30) were labelled exploding gradients by their threads, the two without one (1.0, 10) the
# rate.
RECURRENT_TOKEN_SGD_TOP = 40.0
RECURRENT_SHARE = 0.01  # A recurrence with less of the weights is a side branch, not the model.


def start_rules(s: Symptoms, out: Scores) -> None:
  inputs_large = s.input_rms is not None and s.input_rms > INPUTS_LARGE  # NaN compares False.
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
  if 'alike_units' in s.triggers:
    out.add('initialisation', 4, "at the end a kernel's units were all still the same: units "
                                 'that start alike (a kernel initialised to one constant) stay '
                                 'alike')
  rates = numbers((s.history or {}).get('learning_rate', []))
  if 'no_weight_moved' in s.triggers and bool(np.any(rates > 0)):
    out.add('initialisation', 3, 'not one weight moved at a learning rate above 0: every '
                                 'gradient was exactly 0, as from weights that start where none '
                                 'flows (factors all initialised to zero, two embedding tables '
                                 'say), unless a stop_gradient cuts the loss from them')
  _scale_rules(s, out, inputs_large, off_scale, sound)
  if 'mean_level' in s.triggers and not inputs_large and not explained and not off_scale:
    # Far worse than the labels' mean from normalised inputs, the untrained outputs on the
    # labels' scale (not far under labels left unstandardised), at a usual rate (not one far too
    # low to leave the start): what is left is where the weights started (a SIREN's sine layers
    # from Glorot kernels).
    rate, usual = s.usual_rate(), USUAL_RATE.get(s.optimizer, math.inf)
    if rate is not None and rate >= usual / 100 and s.output_rms is not None and (
        s.output_rms >= s.label_rms / 3):  # NaN compares False: unknown scales name nothing.
      out.add('initialisation', 2, "a regression far worse at the end than predicting its "
                                   "labels' mean, from normalised inputs at a usual rate: an "
                                   'initialiser wrong for the architecture')
    elif _rate_above_usual(s) is not None:
      out.add('learning_rate', 2, "a regression far worse at the end than predicting its "
                                  "labels' mean, at a rate above the usual top")
  if 'initialisation' in s.warnings and not inputs_large and not explained:
    out.add('initialisation', 3, 'a warning at the start: outputs or a loss far off scale '
                                 '(DivergenceCheck, InitialisationCheck)')


def _scale_rules(s: Symptoms, out: Scores, inputs_large: bool, off_scale: bool,
                 sound: bool) -> None:
  """Outputs (or a classifier's first loss) far off scale at the start: whose? (`start_rules`)"""
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
  # A classifier's analogue (its outputs bounded): a first loss the start check warned was far
  # above a uniform guess's, from kernels off the standard scale (`_initialiser_off_scale`); in
  # a run in trouble (a warning alone is none), at a rate not above the usual top (one above it
  # can break the run from any start).
  if (not off_scale and _initialiser_off_scale(s) and (s.triggers or s.faults)
      and _rate_above_usual(s) is None):
    out.add('initialisation', 4, f"the first loss was {s.chance_excess:.3g}x a uniform guess's "
                                 f"from kernels at {s.kernel_ratio:.3g}x LeCun's scale: logits "
                                 'off scale from the initialiser')


def rate_rules(s: Symptoms, out: Scores) -> None:
  loss_growth, norm_growth, _ = s.growth()
  diverged = [t for t in s.triggers if t in ('divergence', 'stalled')]
  # A blow-up in the first updates at a usual rate is the model's (gradient_rules), one from
  # outputs off scale from off-scale kernels the initialiser's (start_rules), one of float16
  # weights at a usual rate float16's (an optimizer epsilon of 0: blind35's Demucs): its
  # divergence or collapse speaks for the rate only half as much.
  amplified = (s.amplified() or _broke_at_modest_rate(s) or _initialiser_off_scale(s)
               or recurrent_sgd_rate(s) is not None
               or (s.half_variables and _usual_throughout(s)))
  blowup = 2 if amplified else 4
  if diverged and 'data' not in s.checks:
    out.add('learning_rate', blowup, 'the training loss diverged while finite and the model got '
                                     'worse on a clean batch')
  # A recurrence under SGD up to RECURRENT_SGD_TOP is within its recipes' rates.
  above = _rate_above_usual(s) if recurrent_sgd_rate(s) is None else None
  if above is not None and s.first_blowup() >= BLOWUP:
    out.add('learning_rate', 5, f'the first updates, at {above:.3g} (above the usual top for '
                                f'{s.optimizer}, {USUAL_RATE[s.optimizer]:.3g}), multiplied the '
                                f'loss {s.first_blowup():.3g}x: the rate')
  elif above is not None and diverged:
    out.add('learning_rate', 2, f'the rate, {above:.3g}, is above the usual top for '
                                f'{s.optimizer} ({USUAL_RATE[s.optimizer]:.3g})')
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
  if 'flat_answers' in s.triggers:
    out.add('learning_rate', 2, "at the end a regression's answers barely varied from example "
                                "to example, its loss at the labels' mean's: a learning rate too "
                                'high knocks a network there, one too low never leaves it')
  if s.collapsed and not (amplified and diverged):  # One blow-up, its divergence told already.
    out.add('learning_rate', blowup, "the model's outputs became the same for every example "
                                     "where an untrained model's were not: its units died, "
                                     'typically of a learning rate too high')
  if loss_growth >= 10 and norm_growth >= 3 and s.cliff()[0] < CLIFF and not amplified:
    # A cliff, or a blow-up at a usual rate, explains it.
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


def gradient_rules(s: Symptoms, out: Scores) -> None:
  loss_growth, norm_growth, jump = s.growth()
  # From a start the initialiser put off scale (start_rules name it), the norms of the first
  # updates are that start's, not a backward pass that multiplies: a jump or cliff is read after
  # them (non-finite gradients right after a jump overflowed, whatever made it).
  late = FIRST_UPDATES if _initialiser_off_scale(s) and _rate_above_usual(s) is None else 0
  late_jump = s.jump(since=late) if late else jump
  if 'data' in s.checks:  # A divergence check blamed the batches: their norms are no growth.
    norm_growth = jump = late_jump = 1.0
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
                                    f'tf.where); {name_the_op(s.forensics)}')
  cliff, at = s.cliff(since=late)
  if grew:
    out.add('exploding_gradients', 3, f'the gradient norm grew {norm_growth:.3g}x before the '
                                      f'trouble while the loss stayed within {loss_growth:.2g}x',
            decisive=True)
  elif late_jump >= 10 and loss_growth < 3:
    out.add('exploding_gradients', 2, f'the gradient norm jumped {late_jump:.3g}x in one step '
                                      'while the loss did not')
  # Above the usual top for the optimizer, a rate can throw the norm off any cliff (SGD at 1.0
  # with momentum: 1e7x in one step); below it, a rate too high raises it by thousands at most.
  if (cliff >= CLIFF and s.op_type() is None and 'data' not in s.checks
      and _rate_above_usual(s) is None):
    out.add('exploding_gradients', 6, f'the gradient norm reached {cliff:.3g}x its median in one '
                                      f'step (step {at}): a cliff, where the backward pass '
                                      'multiplies through a recurrence or a deep path')
  amplified = s.amplified()
  if amplified:
    out.add('exploding_gradients', 5, f'the first updates, at a rate usual for {s.optimizer} '
                                      f'({s.usual_rate():.3g}), multiplied the loss '
                                      f'{amplified:.3g}x: the model amplifies its gradients (depth '
                                      'or a recurrence without normalisation, a sum over many '
                                      'inputs); a lower rate only delays it')
  if _broke_at_modest_rate(s) and not amplified:
    out.add('exploding_gradients', 4, f'the run broke down at a modest rate for {s.optimizer} '
                                      f'({modest_rate(s):.3g} at most, a quarter of the usual top '
                                      'or less) from normalised inputs: what amplified its steps '
                                      'is the model (depth or a recurrence without normalisation, '
                                      'a sum over many inputs)')
  if 'grad_norm_spike' in s.triggers:
    out.add('exploding_gradients', 1, 'a gradient-norm spike triggered a rollback')


def recurrence_rules(s: Symptoms, out: Scores) -> None:
  """A recurrent model that diverged or collapsed under SGD within its recipes' rates
  (`recurrent_sgd_rate`): its gradients, multiplied over the time steps. A prior on the kind of
  model, not the run's own evidence (a lower rate alone trains such runs about as often as a
  clip alone): a cause it puts ahead is named at low confidence (`doctor.diagnose`)."""
  rate = recurrent_sgd_rate(s)
  if rate is not None and 'data' not in s.checks and (s.collapsed or any(
      t in ('divergence', 'stalled') for t in s.triggers)):
    what = 'collapsed' if s.collapsed else 'diverged'
    kind = 'recurrent token model' if s.embedded else 'recurrent model'
    out.add('exploding_gradients', 5, f'a {kind} {what} under SGD at {rate:.3g}, a rate its '
                                      'recipes train at with the gradients clipped (up to '
                                      f'{_recurrent_top(s):.3g}): the recurrence multiplies its '
                                      'gradients over the time steps')


def _recurrent_top(s: Symptoms) -> float:
  return RECURRENT_TOKEN_SGD_TOP if s.embedded else RECURRENT_SGD_TOP


def recurrent_sgd_rate(s: Symptoms) -> Optional[float]:
  """The largest rate of the history (up to the trouble: a warm-up's end counts) where the
  model is mostly recurrent (`Symptoms.recurrent`, a share of RECURRENT_SHARE or more of its
  weights), its optimizer plain SGD (whose step a clipped norm bounds; an adaptive one's it does
  not), the rate at most RECURRENT_SGD_TOP (RECURRENT_TOKEN_SGD_TOP for a token model),
  from batches none of which was found bad, no loss/output mismatch named and no broken start
  warned of (the initialiser's); else None."""
  lr = numbers((s.history or {}).get('learning_rate', []))
  if not s.recurrent >= RECURRENT_SHARE or s.optimizer != 'SGD' or not lr.size or not (
      np.isfinite(lr) & (lr > 0)).all() or lr.max() > _recurrent_top(s) * (1 + 1e-6) or (
          s.input_bad() or s.fault_kinds().get('input') or s.outlier_batches or s.mismatch
          or 'initialisation' in s.warnings):
    return None
  return float(lr.max())


def modest_rate(s: Symptoms) -> Optional[float]:
  """The largest rate of the history (up to the trouble: a warm-up's end counts) where it is
  modest, at most MODEST x the usual top for the run's optimizer, from a clean start
  (`Symptoms.clean_start`); else None."""
  lr = numbers((s.history or {}).get('learning_rate', []))
  usual = USUAL_RATE.get(s.optimizer)
  if not usual or not lr.size or not (np.isfinite(lr) & (lr > 0)).all() or (
      lr.max() > MODEST * usual * (1 + 1e-6)) or not s.clean_start() or loss_sums(s):
    return None
  return float(lr.max())


def _usual_throughout(s: Symptoms) -> bool:
  """Whether every rate of the history (a warm-up's end included) is at most the usual top for
  the run's optimizer (the first updates' rate alone does not say: a warm-up starts low)."""
  lr = numbers((s.history or {}).get('learning_rate', []))
  usual = USUAL_RATE.get(s.optimizer)
  return bool(usual and lr.size and np.isfinite(lr).all() and lr.max() <= usual * (1 + 1e-6))


def loss_sums(s: Symptoms) -> bool:
  """Whether the first loss is SUMMED x what a mean over examples could start at from the
  untrained outputs and labels at their scales (a cross-entropy's log(K) stays under 12 for a
  100 000-way vocabulary; a squared error near the larger RMS squared): a loss summed over pixels
  or tokens, or scaled up, whose gradients, and so each step at a given rate, are that much
  larger. No rate is modest for it. Integer labels are recorded at an RMS of exactly 1 (class
  ids: `diagnostics.output_scale`), which leaves an integer target's own scale unknown: then no
  sum is read. A regulariser's terms (L2 at Keras's default 0.01 over eight He-initialised
  Dense(512) layers: 80) stay under SUMMED too."""
  first = numbers((s.history or {}).get('loss', [])[:1])
  if s.label_rms is None or not math.isfinite(s.label_rms) or s.label_rms == 1.0:
    return False
  scale = max([1.0] + [v * v for v in (s.output_rms, s.label_rms)
                       if v is not None and math.isfinite(v)])
  return bool(first.size and s.first_step == 1 and s.output_ratio is not None
              and first[0] >= SUMMED * scale)


def _initialiser_off_scale(s: Symptoms) -> bool:
  """Outputs far off the labels' scale at the start (or, for a classifier whose outputs are
  bounded, a first loss the start check warned was far above a uniform guess's) from kernels off
  the standard scale and inputs not unscaled, no mismatch named: the initialiser broke it."""
  off = (s.output_ratio is not None and s.output_ratio > OUTPUT_RATIO) or s.chance_excess > 1
  return (off and s.mismatch is None
          and s.kernel_ratio is not None and s.kernel_ratio >= KERNEL_OFF_SCALE
          and not (s.input_rms is not None and s.input_rms > INPUTS_LARGE))


def _rate_above_usual(s: Symptoms) -> Optional[float]:
  """The largest rate of a fresh run's first three updates where it is above the usual top for
  its optimizer (USUAL_RATE), from batches none of which was found bad (a NaN, an input fault, an
  outlier) and no loss/output mismatch named; else None."""
  lr = numbers((s.history or {}).get('learning_rate', [])[:3])
  usual = USUAL_RATE.get(s.optimizer)
  if not usual or not lr.size or s.usual_rate() is not None or not np.isfinite(lr).all() or (
      s.input_bad() or s.fault_kinds().get('input') or s.outlier_batches or s.mismatch):
    return None
  return float(lr.max())


def _broke_at_modest_rate(s: Symptoms) -> bool:
  """A fresh run from no broken start, at a modest rate throughout (`modest_rate`), that under
  plain SGD diverged or collapsed (an adaptive optimizer's step does not grow with the gradient:
  its divergence says nothing of the gradients), or under any optimizer went non-finite in
  float32 after growing: forensics located a product that overflowed in the model, or the loss or
  the gradient norm grew 10x before it (no transient re-run). Few steps of a modest rate do that
  only where the model amplifies them."""
  if modest_rate(s) is None or 'untrainable_start' in s.triggers or s.first_step != 1:
    return False
  diverged = (s.optimizer == 'SGD' and 'data' not in s.checks
              and any(t in ('divergence', 'stalled') for t in s.triggers))
  # A product that overflowed in the model is its growth; any other op forensics located, or a
  # NaN it found built on purpose (a mask), names another cause.
  loss_growth, norm_growth, _ = s.growth()
  grew = ((s.op_type() in PRODUCT_OPS and not s.op_in_loss()) or (s.op_type() is None and any(
      10 <= g < math.inf for g in (loss_growth, norm_growth))))  # inf: nothing finite to read.
  non_finite = (bool(s.faults) and grew and not s.fp16 and 'transient' not in s.rechecks
                and not s.sporadic())
  return diverged or (s.collapsed and s.optimizer == 'SGD') or non_finite
