"""Benchmarks of cdcnorm: each ``bench/<name>.py`` is a ``python -m bench.<name>`` command.

Every figure is a ratio against a baseline measured in the same run (see :mod:`bench.common`);
``bench/run`` runs them all at a small size. Results and findings are in ``bench/README.md``.
"""
