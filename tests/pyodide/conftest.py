"""Only ``test_real_pyodide.py`` is a pytest module here: ``cases/`` and
``inside/`` run inside Pyodide (they import ``js`` and the tier's JS objects)."""

collect_ignore_glob = ["cases/*", "inside/*"]
