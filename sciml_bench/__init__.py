"""sciml-bench: fair, reproducible benchmarks of solving and differentiating ODEs.

Heavy libraries are imported only inside backend modules, so importing this
package is instant.
"""

__version__ = "0.1.0"
