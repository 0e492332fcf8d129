"""Scripted fault-injection tests (``-m faults``; also ``integration``).

Real processes on loopback: the test broker (Apache Kafka, or Tansu with
``CDCNORM_TEST_BROKER=tansu``: :mod:`tests.brokers`), redis-server
(``service.local.start_redis``), the worker (``python -m cdcnorm.cli worker``) and the sink
(``python -m sink --once``, in its own process group so a kill takes its JVM too).

* ``test_crashes``: the worker SIGKILLed at 5 seeded stream positions, then the sink SIGKILLed
  at 5 points (``mid-merge``, a timer during the MERGE, ``between-table-commits``,
  ``after-iceberg-commit``, ``after-kafka-commit``; see :func:`sink.faults.crash_point`).
* ``test_redis_outage``: the worker's redis-server frozen (SIGSTOP) for 30 s.
* ``test_broker_outage``: the broker frozen (SIGSTOP) for 30 s under a running worker and sink.
* ``test_kafka_cluster_faults``: a 3-node Apache Kafka cluster (replication factor 3,
  ``min.insync.replicas`` 2, every producer idempotent with ``acks=all``) under one worker and one
  sink while changes flow: the node leading every partition read and written (and both groups'
  coordinators) SIGKILLed and restarted with its data; a rolling restart of every node
  (SIGTERM, start, in sync); that node frozen (SIGSTOP) for 20 s. Then lost 0, out of order 0,
  wrong values 0 (duplicates counted), the one dead letter on the DLQ, the record batches on every
  replica's disk written by idempotent producers, and the sink's tables equal the final state.
* ``test_rebalance``: a second worker joins and later leaves while a Canal stream flows; no
  committed offset may pass a change that never arrived.
* ``test_redis_forgets``: ``FLUSHALL`` and a restart without persistence under ``qlik-json`` and
  ``arcion-csv`` data whose metadata lives in the metadata log.
* ``test_fleet_chaos``: 200 000 changes over 6 tables in 3 formats (``canal-json``,
  ``maxwell-json``, ``qlik-json`` with its metadata messages), 3 source topics of 6 partitions, a
  group of 3 workers; a seeded schedule SIGKILLs or SIGTERMs a worker 12 times (each replaced at
  once), adds a 4th worker and removes one, while the stream flows. Then every change is on the
  normalized topics in per-key order, every record (replays too) holds its version's values (Qlik
  updates leaving a column out are completed from the row state), the DLQ is empty, every SIGTERMed worker left by itself
  within 30 s (exit 0, or 4 at its 20 s stop deadline, reported), and one sink's Iceberg tables equal the history's final state.
* ``test_row_state_bound``: 1M distinct keys' row images into one table, bounds 250000 and 1000000
  (the store API, two writers, a redis-server of its own for ``INFO memory``).
* ``test_dlq_buffer_bound``: 100 MiB of dead letters through ``worker.max_inflight_bytes`` of 1 MiB,
  the broker frozen for 4 s meanwhile.
* ``test_oversized_message``: a 50 MiB source message between 3000 changes.
* ``test_record_too_large``: normalized records above ``worker.max_record_bytes`` (100000) in the middle
  of 2000 changes, and a size refusal by the output producer (librdkafka's ``message.max.bytes``).
* ``test_topic_size_limits``: a topic's ``max.message.bytes`` enforced by Apache Kafka: a normalized
  record the broker refuses (normalized topics at 150000 bytes, the worker's limits above) in the
  middle of 2000 changes; DLQ topics smaller than a dead letter (known at start, lowered while the
  worker runs, smaller than any dead letter).
* ``test_sink_write_outage``: one table's Iceberg metadata folder refuses writes mid-run; the sink
  retries with back-off, commits no offset, reports why, and resumes.
* ``test_sink_ownership``: sinks of two consumer groups on one warehouse: the second stops with an
  error naming the owner; a third takes the tables over, and the first stops.

Knobs: ``CDCNORM_FAULT_CHANGES`` (changes streamed through the crash tests; default and CI
value 100000, about 2 minutes for the worker part on 2 cores), ``CDCNORM_FLEET_CHANGES``
(changes of the fleet test, default and CI value 200000, produced over 80 s; 3.5 to 4.5 minutes
in all on 2 cores), ``CDCNORM_FAULT_OUTAGE_S`` (outage length, default 30),
``CDCNORM_CLUSTER_RATE`` (changes per second of the cluster tests, default 200; each test about
2.5 to 4 minutes on 2 busy cores). Run ``pytest tests/faults -s`` (or ``-rP``) to see what each
test injected and counted.
"""
