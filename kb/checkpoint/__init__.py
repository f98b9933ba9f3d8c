"""The value checkpoint: whether routing by the knowledge beats routing without it.

Two A/B experiments on eval cases **disjoint from the cases that produced
the claims** (a shared name or prompt is leakage and refused as a
``ConfigError``):

* **Criterion 1 — the start rung.** Per (ladder, task class) cell, the
  baseline arm runs the cell's cases at the ladder's default start tier and
  the treatment arm at the tier the verified layer recommends. A cell with a
  recommendation passes by :data:`~kb.checkpoint.rules.START_RUNG`. Cells
  without one run the default tier once and are reported, but neither vote
  nor enter the pooled arms (identical arms would only dilute the
  comparison). The criterion holds when a strict majority of recommended
  cells pass and the pooled arms of those cells pass the same rule; with no
  recommendation at all there is nothing to earn its keep and it does not
  hold.
* **Criterion 2 — which profile.** For each orchestrated case an
  orchestrator model picks a profile (structured ``{"profile": name}``) once
  with the knowledge card in its prompt and once without; the chosen
  profile's model runs the case. Both orchestrator calls are paid and
  counted in their arm. Passes by :data:`~kb.checkpoint.rules.PROFILE`.

Each criterion is decided with intervals (SPEC 13.3, :class:`~kb.checkpoint.rules.IntervalRule`):
the treatment and the baseline are paired on the cases both ran (a case's
score is the mean of its repeats) and the paired difference's 95 % interval
says ``passed``, ``failed`` or ``inconclusive`` (with how many more cases would
decide); the pooled arms decide criterion 1 and its cells vote descriptively;
criterion 2 is ``not applicable`` where the card says nothing about the task
class, and its cost ratio is the chosen profiles' (the card's prompt tokens
never fail it). The whole checkpoint is ``passed`` (every applicable criterion
passed), ``not passed`` (one failed or was contaminated) or ``inconclusive``.
``--rule rulvar`` decides by the seed's point rules instead (the report
carries both). Controls from the same runs: the always-strongest arm (the
ladder's top rung) and a cost-matched random mix of baseline and strongest.

Any arm with a refused, exhausted, failed or judge-incomplete run is
*contaminated*: its verdict cannot pass, and the report names the run.

The package: :mod:`~kb.checkpoint.rules` (the two rules, thresholds written
once), :mod:`~kb.checkpoint.spec` (the spec and the leakage check),
:mod:`~kb.checkpoint.arms` (arms, cells, the report),
:mod:`~kb.checkpoint.run` (plan, then run) and :mod:`~kb.checkpoint.table`.
"""

from kb.checkpoint.arms import (
    Arm,
    CheckpointOptions,
    CheckpointReport,
    Controls,
    Decision,
    StartRungCell,
    checkpoint_options,
    compare,
)
from kb.checkpoint.rules import (
    PROFILE,
    PROFILE_INTERVAL,
    START_RUNG,
    START_RUNG_INTERVAL,
    IntervalRule,
    ValueRule,
    paired_decision,
    profile_rule,
    start_rung_rule,
)
from kb.checkpoint.run import CheckpointPlan, plan_checkpoint, run_checkpoint
from kb.checkpoint.spec import CheckpointSpec, leakage_issues, load_checkpoint_spec
from kb.checkpoint.table import checkpoint_table, plan_text

__all__ = [
    "PROFILE",
    "PROFILE_INTERVAL",
    "START_RUNG",
    "START_RUNG_INTERVAL",
    "Arm",
    "CheckpointOptions",
    "CheckpointPlan",
    "CheckpointReport",
    "CheckpointSpec",
    "Controls",
    "Decision",
    "IntervalRule",
    "StartRungCell",
    "ValueRule",
    "checkpoint_options",
    "checkpoint_table",
    "compare",
    "leakage_issues",
    "load_checkpoint_spec",
    "paired_decision",
    "plan_checkpoint",
    "plan_text",
    "profile_rule",
    "run_checkpoint",
    "start_rung_rule",
]
