"""How things are measured: clocks and statistics (``clock``), RAM/VRAM (``memory``),
the machine (``environment``), what a case's outcome is (``status``) and how
accurate it was (``metrics``). Imports nothing else from the package.
"""
