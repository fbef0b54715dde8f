"""The ``servesweep`` command line: one module per command, each with
``add_parser(subparsers)`` that sets ``func`` (``cmd_<name>(args) -> exit code``).

- ``cli``: ``main`` and the parser (``COMMANDS``).
- ``run``: ``run`` and ``resume``; ``plan``; ``report``; ``capacity`` (explain a saved
  server log); ``calibrate``; ``profile_model`` (``profile-model``: a short profile of the
  user's model, fitted and stored, with ``profiling``: that work, which ``run`` also does
  first for a guided search, ``search.profile_first``); ``sync`` (a ledger into MLflow, exactly
  once; ``track`` is its old name); ``import_sweep`` (``import``: a sweep folder or
  tarball brought back from another machine, made latest and synced).
"""
