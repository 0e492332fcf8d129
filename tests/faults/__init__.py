"""Scripted fault-injection tests (``-m faults``; also ``integration``).

Real processes on loopback: Tansu (``service.local.start_tansu``), redis-server
(``service.local.start_redis``), the worker (``python -m service.cli worker``) and the sink
(``python -m sink --once``, in its own process group so a kill takes its JVM too).

* ``test_crashes``: the worker SIGKILLed at 5 seeded stream positions, then the sink SIGKILLed
  at 5 points (``mid-merge``, a timer during the MERGE, ``between-table-commits``,
  ``after-iceberg-commit``, ``after-kafka-commit``; see :func:`sink.faults.crash_point`).
* ``test_redis_outage``: the worker's redis-server frozen (SIGSTOP) for 30 s.
* ``test_broker_outage``: the broker frozen (SIGSTOP) for 30 s under a running worker and sink.
* ``test_row_state_bound``: 1M distinct keys' row images into one table, bounds 250000 and 1000000
  (the store API, two writers, a redis-server of its own for ``INFO memory``).
* ``test_dlq_buffer_bound``: 100 MiB of dead letters through ``worker.max_inflight_bytes`` of 1 MiB,
  the broker frozen for 4 s meanwhile.
* ``test_oversized_message``: a 50 MiB source message between 3000 changes.
* ``test_record_too_large``: normalized records above ``worker.max_record_bytes`` (100000) in the middle
  of 2000 changes, and a size refusal by the output producer (librdkafka's ``message.max.bytes``).

Knobs: ``CDCNORM_FAULT_CHANGES`` (changes streamed through the crash tests; default and CI
value 100000, about 2 minutes for the worker part on 2 cores), ``CDCNORM_FAULT_OUTAGE_S``
(outage length, default 30). Run ``pytest tests/faults -s`` (or ``-rP``) to see what each test
injected and counted.
"""
