"""The doctor's vocabulary: the causes it can name (`CAUSES`), the op types and thresholds its
rules read, and `Scores`, the points and evidence each rule group adds to."""

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
               'ReciprocalGrad', 'InvGrad', 'Digamma', 'Lgamma', 'Atanh', 'Acos', 'Asin',
               'Acosh')  # Domain errors: acosh below 1, as a Poincaré distance past the ball.
# Of those, the inverse functions: NaN outside a domain, not at a 0 (their remedy differs).
DOMAIN_OPS = ('Acosh', 'Acos', 'Asin', 'Atanh')
# Products: a first Inf born in one of these, from finite operands, is an overflow.
PRODUCT_OPS = ('Mul', 'MatMul', 'BatchMatMul', 'BatchMatMulV2', 'BatchMatMulV3', 'Prod', 'Square',
               'Einsum', 'Cumprod')
FLOAT16_MAX = 65504.0
EXP_OVERFLOW = 88.7  # exp(x) overflows float32 above this.
SQUARE_OVERFLOW = 1.8e19  # x * x overflows float32 above this (its largest is 3.4e38).
# ...and a sum of squares over a batch's 4096 elements or fewer above this (a Sum or Mean in
# the loss that forensics located first: outputs of 1.7e19 made an MSE's batch sum infinite).
SUM_OVERFLOW = SQUARE_OVERFLOW / 64
REDUCTION_OPS = ('Sum', 'Mean')
OUTPUT_RATIO = 30.0  # Outputs this many times the labels' scale: the initial weights (as
# DivergenceCheck's start check).
# Initial kernels whose RMS is this many times LeCun's sqrt(1 / fan_in) or more are off the
# standard scale (policies/weight_scale.py): He's is 1.41 times it, Glorot's at most that.
KERNEL_OFF_SCALE = 3.0
# A finite gradient norm this many times the run's median one: a cliff (exploding gradients). A
# rate too high raises the norm with the loss by tens to thousands; a cliff is far beyond.
CLIFF = 1e4


class Scores:
  """Points and evidence per cause, filled by the rule groups (`causes`, `course`); `decisive`
  names the causes with evidence that settles the question by itself (the op forensics located,
  batches that failed an input check, a re-run that was finite, ...): only they may be named
  with high confidence."""

  def __init__(self):
    self.found = {c: [0.0, []] for c in CAUSES}
    self.decisive = set()

  def add(self, cause: str, points: float, evidence: str, decisive: bool = False) -> None:
    self.found[cause][0] += points
    self.found[cause][1].append(evidence)
    if decisive:
      self.decisive.add(cause)


def name_the_op(forensics) -> str:
  """How the op can be named: Forensics where it did not run, else what its search found."""
  if not forensics:
    return 'add Forensics() to name the op'
  op = forensics.get('op_level') or {}
  if op.get('found'):
    return f"Forensics located a {op.get('op_type')} ({op.get('op_name')})"
  return (f"Forensics did not name it: {op['note']}" if op.get('note') else
          'Forensics(recheck=True) to name it')


def record_recheck(report, faults) -> list:
  """['transient_record'] where a run's one faulty step was re-run by Forensics' record (`rerun`,
  the recheck's own re-run: the same batch, from the state the skip left bit-identical) and came
  out finite, its op-level re-run locating no op either: what `Forensics(recheck=True)` would
  have said, read as less (a one-off fault of a random draw in the model, a division by a
  keep-rate drawn 0 once in 300 steps, is re-drawn by either re-run). [] otherwise: several
  faults (a Gumbel softmax's at a low temperature recur; the record re-ran the first alone), an
  applied update, no record."""
  report = report or {}
  like_for_like = report.get('applied') is False and str(report.get('state', '')).startswith(
      'before the faulty step')
  finite = (report.get('rerun') or {}).get('finite') is True
  located = (report.get('op_level') or {}).get('found')
  return (['transient_record'] if len(faults) == 1 and like_for_like and finite and not located
          else [])
