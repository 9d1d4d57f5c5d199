"""The interfaces of stable_train: host decisions, the views a policy gets, the Policy base class.

A policy has two halves (`halves`). Its in-graph half runs inside the one traced train step (no
Python control flow on tensors there); its host half runs eagerly between loops: `decide` reads
the reports the step produced (and a read-only `PolicyContext`) and returns a `Decision`;
`execute` carries a decision out through a `RunHandle`, the one narrow handle onto the run. What
only some policies do is a small protocol a policy implements by defining its methods
(`protocols`). Policy state lives in `tf.Variable`s owned by the policy (a `tf.Module`), so it is
checkpointed with the model and restored on resume and rollback. The names of `decision`,
`halves`, `protocols`, `reports` and `views` are re-exported here.
"""

import tensorflow as tf

# pylint: disable=unused-import  (the public names)
from stable_train.core.decision import (
    ABORT, ACT, ACTIONS, CONTINUE, DIVERGED, ESCALATE, ROLLBACK, STOP, STOP_STATUSES, Decision)
from stable_train.core.halves import MEASURED_STATS, HostHalf, InGraphHalf
from stable_train.core.protocols import (
    BestMarker, EndCheck, EvalWatcher, FitCheck, LoopObserver, LossScaler, Rechecker,
    Recovery, Stopper)
from stable_train.core.reports import (
    REPORT_FIELDS, ReportField, StepReports, fault_kind, first_false, flatten_inputs,
    input_paths, offending_tensor, step_faulty)
from stable_train.core.views import NormCeiling, PolicyContext, RunHandle
# pylint: enable=unused-import


class Policy(InGraphHalf, HostHalf, tf.Module):
  """Base class of stable_train policies. Override only the hooks a policy needs.

  In-graph half (`InGraphHalf`; traced into the train step): `check_batch`, `sanitize_labels`,
    `transform_loss`, `transform_gradients`, `allow_update`, `update_state`; `end_step`, traced
    into the loop around the step (outside XLA); and `build`, eager, once, before the trace.
  Host half (`HostHalf`; eager, once per loop): `decide`, `execute`, `summary`, `is_healthy`.
  Protocols (`protocols`; the core asks `isinstance`, never the class): `LossScaler` (fp16
    loss scaling, traced), `LoopObserver` (fold each loop's reports into host-read statistics),
    `Recovery` (take over an escalation), `Rechecker` (decide again after its own ACT),
    `EvalWatcher` (act on evaluations), `FitCheck` (refuse a fit it cannot work with),
    `BestMarker` (mark the best checkpoint), `Stopper` (a stop that outlives the process),
    `EndCheck` (a last word on a run about to end),
    `NormCeiling` (a fixed ceiling a recovery sets).
  Traits: `decides_on_clean_loops`, `uses_first_batch` (host); `updates_after_apply`,
    `end_step_compiles`, `uses_end_step` (in-graph); `checkpointed`.
  """

  # False for a policy whose state is scratch (the default stack's optional Forensics): left out
  # of the run's checkpoints, so adding or dropping it never stops a resume.
  checkpointed = True
