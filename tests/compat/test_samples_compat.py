"""The `cdcnorm up` samples (cdcnorm/samples) through the real Kafka Connect and Debezium runtime.

The same messages ``make up`` produces, decoded offline the way the worker decodes them; the
integration test ``tests/service/test_integration.py::test_cdcnorm_up_runs_the_samples`` checks
what the worker itself wrote for them.
"""

from __future__ import annotations

from typing import Any

import pytest

from cdcnorm.up import Sample, load_samples
from tests.conftest import assert_connect_accepts
from transforms.decoders import Message, create_decoder
from transforms.envelope import EmitOptions
from transforms.pipeline import Pipeline

SAMPLES = load_samples()


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.format_id)
def test_up_samples_accepted_by_connect(sample: Sample, connect_checker: Any) -> None:
    decoder = create_decoder(sample.format_id, sample.options)
    pipeline = Pipeline(decoder, EmitOptions(prefix="cdcnorm", decimal_mode=decoder.options.decimal_handling_mode))
    records = []
    for offset, (key, value) in enumerate(sample.messages):
        records.extend(pipeline.process(Message(value=value, key=key, topic=f"samples.{sample.format_id}", offset=offset)))
    assert records, sample.format_id
    assert_connect_accepts(connect_checker, records, f"{sample.format_id} sample records")


def test_every_format_has_samples() -> None:
    """``cdcnorm up`` shows every input format (``auto`` is a detector, not a format)."""
    from transforms.decoders import DECODERS

    assert sorted(s.format_id for s in SAMPLES) == sorted(f for f in DECODERS if f != "auto")
    assert all(s.messages for s in SAMPLES)
