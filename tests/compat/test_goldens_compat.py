"""Every golden record of every format, through the real Kafka Connect and Debezium runtime.

Keys and values must pass ``JsonConverter.toConnectData`` (``schemas.enable=true``), come back
unchanged from ``fromConnectData``, and unwrap with Debezium's ``ExtractNewRecordState`` to a row
equal to ``after`` (``before`` for deletes). See ``tests/compat/java/ConnectCompat.java``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.compat.records import golden_records
from tests.conftest import assert_connect_accepts
from tests.goldens import Case, cases


@pytest.mark.parametrize("case", cases(), ids=str)
def test_golden_records_accepted_by_connect(case: Case, connect_checker: Any) -> None:
    records = golden_records(case)
    assert_connect_accepts(connect_checker, records, f"records of {case}")
