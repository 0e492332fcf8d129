"""What the worker (``service``) and the sink (``sink``) both need and the pure library
(``transforms``) must not hold, because it talks to a Kafka-side service: the Confluent Schema
Registry's settings and client (:mod:`cdcnorm_common.registry`).

``service`` and ``sink`` never import each other; both import this package and ``transforms``
(``tests/test_rooms.py`` checks it).
"""
