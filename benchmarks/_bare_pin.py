"""How a bare twin pins its threads before its steady samples, the one copy every
``_bare_*.py`` calls after its first calls (outside every clock).

- ``BARE_PIN=1`` (``harness_overhead.py``, unless ``--no-pin``; ``process_split.py``'s
  ``pinlate``): the suite's own rule, ``sciml_bench.measure.affinity.pin_steady`` (every
  thread on the core other processes use least; standard library only), so that only the
  harness differs from a suite worker;
- unset: no pinning, the library's defaults.
"""

import os


def pin_as_the_suite() -> None:
    """Pin every thread as a suite worker pins its steady samples, where ``BARE_PIN=1``."""
    if os.environ.get("BARE_PIN") == "1":
        from sciml_bench.measure.affinity import pin_steady

        pin_steady({})
