"""Knowledge that follows the model: a cell's epoch as arrays, and the suite's rotation.

A cell (subject × task class) measured under the interval gate keeps an
**epoch**: the evidence of every night since the epoch began, pooled by case
— each distinct case contributes the mean of its scores over the nights that
measured it, so ``n`` is the number of distinct cases and repeating a case is
never a new case. The gate decides on the epoch's estimate, which sharpens
night after night instead of starting over.

An epoch ends when the suite changes (its fingerprint), when the subject's
canary drifts, when ``--new-epoch`` is asked for, or when the cell's change
detector alarms. The rule that decides what each night runs and when a
detector alarms is the nightly rule (:mod:`kb.sweep.nightly`, SPEC 13.7),
under ``sampling = "adaptive"`` and — with every case every night —
``sampling = "full"``. v3's rule (``"adaptive-v3"``) left kb in v5 (SPEC
14.2); its epochs files are read and continued under the nightly rule, and
``bench/v3_rule.py`` keeps it as the simulation's baseline.

This module holds what the rule and the sweep share: :class:`EpochArrays`
(vectorized over cells, a leading cell axis, so one sweep updates all its
cells at once and ``bench/truth_sim.py`` runs the same code over thousands
of simulated cells), :class:`NightResult` and the stable :func:`rotation`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from kb.stats import wilson_arrays

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

HELD_NONE, HELD_STRENGTH, HELD_WEAKNESS = 0, 1, 2
NightPass = Literal["first", "confirm", "refill", "more"]
"""What a pass of the night is for: ``first``, then ``more`` (a later look of the
nightly rule, :mod:`kb.sweep.nightly`); ``confirm`` and ``refill`` are v3's passes
(``bench/v3_rule.py``)."""


def rotation(fingerprint: str, size: int) -> IntArray:
    """The suite's stable case order: a permutation of ``range(size)`` seeded by its fingerprint."""
    seed = int(hashlib.sha256(fingerprint.encode()).hexdigest()[:16], 16)
    return np.random.default_rng(seed).permutation(size).astype(np.int64)


@dataclass
class EpochArrays:
    """The epochs of ``B`` cells, each with up to ``K`` cases (padding beyond ``size``)."""

    scores: FloatArray
    """[B, K] sum of the case's scores over the epoch's nights."""
    counts: FloatArray
    """[B, K] nights the epoch measured the case."""
    down: FloatArray
    """[B] the drop detector."""
    up: FloatArray
    """[B] the rise detector."""
    cursor: IntArray
    """[B] where tonight's rotation starts."""
    size: IntArray
    """[B] the cell's pool size (cases 0..size-1 are real)."""
    level: FloatArray
    """[B] the level the detectors read against (NaN: none yet); the rule sets it."""

    @classmethod
    def empty(cls, size: IntArray, width: int) -> EpochArrays:
        """Fresh epochs for cells of the given pool sizes."""
        cells = len(size)
        return cls(
            np.zeros((cells, width)),
            np.zeros((cells, width)),
            np.zeros(cells),
            np.zeros(cells),
            np.zeros(cells, dtype=np.int64),
            size.astype(np.int64),
            np.full(cells, np.nan),
        )

    def estimate(self) -> tuple[FloatArray, IntArray]:
        """Per cell: the sum of case means, and ``n`` (distinct cases measured)."""
        seen = self.counts > 0
        means = np.divide(self.scores, self.counts, out=np.zeros_like(self.scores), where=seen)
        return means.sum(axis=1), seen.sum(axis=1).astype(np.int64)

    def interval(self) -> tuple[FloatArray, FloatArray]:
        """Per cell: the 95 % Wilson interval of the epoch's estimate (cases as the unit)."""
        successes, n = self.estimate()
        return wilson_arrays(successes, n.astype(np.float64))


@dataclass
class NightResult:
    """What one night (so far) did to each cell's epoch."""

    state: EpochArrays
    alarm_down: BoolArray
    """[B] the drop detector ended the epoch (a held strength or no claim watched it)."""
    alarm_up: BoolArray
    """[B] the rise detector ended the epoch."""

    @property
    def alarmed(self) -> BoolArray:
        """[B] either detector ended the epoch."""
        return self.alarm_down | self.alarm_up
