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

Any arm with a refused, exhausted, failed or judge-incomplete run is
*contaminated*: its verdict cannot pass, and the report names the run.
Passed = criterion 1 AND criterion 2.

The package: :mod:`~kb.checkpoint.rules` (the two rules, thresholds written
once), :mod:`~kb.checkpoint.spec` (the spec and the leakage check),
:mod:`~kb.checkpoint.arms` (arms, cells, the report),
:mod:`~kb.checkpoint.run` (plan, then run) and :mod:`~kb.checkpoint.table`.
"""

from kb.checkpoint.arms import Arm, CheckpointReport, StartRungCell
from kb.checkpoint.rules import PROFILE, START_RUNG, ValueRule, profile_rule, start_rung_rule
from kb.checkpoint.run import CheckpointPlan, plan_checkpoint, run_checkpoint
from kb.checkpoint.spec import CheckpointSpec, leakage_issues, load_checkpoint_spec
from kb.checkpoint.table import checkpoint_table

__all__ = [
    "PROFILE",
    "START_RUNG",
    "Arm",
    "CheckpointPlan",
    "CheckpointReport",
    "CheckpointSpec",
    "StartRungCell",
    "ValueRule",
    "checkpoint_table",
    "leakage_issues",
    "load_checkpoint_spec",
    "plan_checkpoint",
    "profile_rule",
    "run_checkpoint",
    "start_rung_rule",
]
