"""The fix an error message suggests: the nearest known name for a typo, the stray key that
was probably meant, the key to set.

A validation error that says only what is wrong leaves the user to find the fix; these
helpers give the one-clause fix the parser and :mod:`sciml_bench.problem.expr` append to
their reasons. Pure string work: no sympy, no NumPy, so the expression parser can use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

#: how close a name must be to count as "probably meant" (difflib's ratio): 0.6 catches a
#: dropped, doubled or swapped letter in names of three letters or more ('hh' for 'h' is
#: 0.67, 'gNA' for 'gNa' 0.67) without pairing unrelated short names ('k9' with 'k1', 0.5)
CUTOFF = 0.6


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The known name ``word`` was most probably meant to be, or None.

    A different case first (``Radau`` for ``radau``), then the same letters in another order
    (``tanh`` for ``tahn``, where difflib prefers ``tan``), then difflib's closest match
    above :data:`CUTOFF`."""
    names = [k for k in known if k != word]
    folded = [k for k in names if k.lower() == word.lower()]
    swapped = [k for k in names if sorted(k.lower()) == sorted(word.lower())]
    if folded or swapped:  # a case slip, then two letters swapped ('tahn' is 'tanh', not 'tan')
        return (folded or swapped)[0]
    close = difflib.get_close_matches(word, names, n=1, cutoff=CUTOFF)
    return close[0] if close else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the nearest known name, or ``""`` when none is near."""
    close = nearest(word, known)
    return f"; did you mean {close!r}?" if close else ""


def pair_strays(missing: Sequence[str], stray: Sequence[str]) -> list[tuple[str, str]]:
    """Pairs ``(stray, missing)`` where a stray key is probably a typo of a missing one
    (``hh`` written for the state ``h``), each key used at most once."""
    pairs = []
    left = list(missing)
    for s in stray:
        m = nearest(s, left)
        if m is not None:
            pairs.append((s, m))
            left.remove(m)
    return pairs


def quoted(names: Sequence[str]) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b' and 'c'``: names as a sentence lists them."""
    q = [repr(n) for n in names]
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} and {q[-1]}"


#: what to write for a required key that is missing, by its dotted key
MISSING: dict[str, str] = {
    "name": 'add name = "my-model" at the top of the file (letters, digits, - _ .)',
    "stiff": "add stiff = true (a stiff problem: implicit solvers) or stiff = false at the "
             "top of the file",
    "state": 'add a [state] section with names = ["x", ...] and initial = [1.0, ...]',
    "state.names": 'add names = ["x", ...] under [state], one name per state',
    "state.initial": "add initial = [...] under [state], one starting value per state",
    "equations": 'add an [equations] section with one expression per state, e.g. x = "-k*x"',
    "time": "add a [time] section with span = [t0, t1] and save = { linspace = [t0, t1, 50] }",
    "time.span": "add span = [t0, t1] under [time]",
    "time.save": "add save = { linspace = [t0, t1, 50] } under [time] (or logspace, or "
                 "points = [...])",
    "loss": 'add a [loss] section: kind = "fit" with truth = { k = ... }, or kind = "final" '
            "with weights = [...]",
    "loss.kind": 'add kind = "fit" (least squares against a truth) or kind = "final" '
                 "(a weighted sum of the final state) under [loss]",
    "loss.weights": 'a final loss needs weights = [...] under [loss], one per state',
    "ensemble.sizes": "add sizes = [1, 16, 256] under [ensemble], the member counts",
    "ensemble.vary": "add an [ensemble.vary] table, e.g. k = { uniform = [0.5, 1.5] }",
    "sizes": "add a [sizes] section, e.g. n = 100",
    "state.shape": 'add shape = "n" under [state] (the name of a size in [sizes])',
}


def missing(key: str) -> str:
    """The reason for a required key that is missing: ``"missing; add ..."``."""
    section, _, leaf = key.rpartition(".")
    fix = MISSING.get(key) or (f"add {leaf} = ... under [{section}]" if section
                               else f"add {key} = ... at the top of the file")  # fmt: skip
    return f"missing; {fix}"
