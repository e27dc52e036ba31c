"""What a problem is, and its tight reference.

Data flows ``spec`` (TOML → :class:`~sciml_bench.problem.spec.Problem`, with the
whitelist parser in ``expr``) → ``codegen`` (native code per target) → ``loss``
→ ``compiled`` (the JSON bundle a worker receives) and ``reference`` (the tight
solution and gradient). Nothing here imports any other part of the package.
"""
