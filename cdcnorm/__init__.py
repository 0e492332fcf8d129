"""The ``cdcnorm`` command line: the one place that spans the worker (``service``) and the sink
(``sink``), which never import each other.

* :mod:`cdcnorm.cli`: the commands (``transform``, ``formats``, ``validate-config``, ``worker``,
  ``sink``, ``tables``, ``tail``, ``dlq replay``, ``up``); ``validate-config`` and the worker
  check the ``sink:`` section by handing the sink's config model to
  :func:`service.config.parse_config`.
* :mod:`cdcnorm.up`: ``cdcnorm up``, the whole pipeline on one machine with the sample messages
  of every format (``cdcnorm/samples``).

``python -m cdcnorm`` is the ``cdcnorm`` command.
"""
