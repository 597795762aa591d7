"""The real-Pyodide tier: tickwork's Workers code under npm ``pyodide@0.28.2`` (see runner.mjs)."""
