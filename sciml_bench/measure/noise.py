"""The noise floor: the smallest timing ratio the suite reports as a real difference.

Two runs of identical code on one machine differ by a few percent (another process, the
CPU's frequency, the allocator); a ratio inside the floor is never called a change,
whatever a significance test on the samples says. ``compare`` and the per-problem
verdict share this one definition.
"""

from __future__ import annotations

#: ratio NEW/OLD (or runner-up/fastest) inside [1/NOISE_FLOOR, NOISE_FLOOR] is noise;
#: measured between identical runs by benchmarks/compare_false_alarms.py
NOISE_FLOOR = 1.10


def clears_noise(ratio: float, floor: float = NOISE_FLOOR) -> bool:
    """Whether a ratio of two timings is outside the noise floor, in either direction."""
    return ratio >= floor or ratio <= 1.0 / floor
