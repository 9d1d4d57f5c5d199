"""`ReportRing`: the last N step reports of a step driven from outside (Keras `fit`, a
hand-written loop), packed into one variable in the step and read by the host in one transfer."""

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from stable_train.core import reports as reports_lib


class ReportRing:
  """A ring of packed step reports (`reports.pack_report`), indexed by the global step.

  The step stores its report (`store`, traced, cross-replica context); the host reads the reports
  of the steps after the last one it saw (`read`). A host that reads at least every `size` steps
  sees every report.

  Args:
    size: how many reports the ring holds.
    strategy: the strategy whose scope the variable is created in.
    float_dtype: the dtype of the loss and norms in the reports.
  """

  def __init__(self, size: int, strategy: tf.distribute.Strategy,
               float_dtype: tf.DType = tf.float32):
    self.dtypes = reports_lib.report_dtypes(float_dtype)
    self._columns = reports_lib.report_columns(self.dtypes)
    self._step_column = reports_lib.report_layout(self.dtypes).index('step')
    self.size = size
    with strategy.scope():
      self.rows = tf.Variable(tf.zeros([size, len(self.dtypes)], tf.float64), trainable=False,
                              name='report_rows')

  def store(self, report) -> tf.Tensor:
    """Stores one step's report (it holds 'step', the global step after it). Traced."""
    row = reports_lib.pack_report(report, self.dtypes)
    index = tf.math.floormod(report['step'] - 1, self.size)
    # A whole-variable assign: a MirroredVariable has no scatter (the rows are a few KB).
    return self.rows.assign(tf.tensor_scatter_nd_update(self.rows, [[index]], [row]))

  def clear(self) -> None:
    """Forgets every stored report (after a restore moved the global step back). Eager."""
    self.rows.assign(tf.zeros_like(self.rows))

  def read(self, since_step: int, *, variable_paths: Sequence[str],
           input_paths: Sequence[str]) -> Optional[reports_lib.StepReports]:
    """The stored reports of the steps after global step `since_step`, in step order, or None
    when there are none. One transfer. Eager."""
    rows = self.rows.numpy()
    steps = rows[:, self._step_column]
    new = np.flatnonzero(steps > since_step)
    if not new.size:
      return None
    columns = reports_lib.unpack_reports(rows[new[np.argsort(steps[new])]], self._columns)
    return reports_lib.StepReports.from_columns(columns, variable_paths=variable_paths,
                                                input_paths=input_paths)
