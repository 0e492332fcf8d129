"""Every case under tests/data/<format>/ decodes to its expected canonical output."""

from __future__ import annotations

import pytest

from tests.goldens import Case, cases, check_case


@pytest.mark.parametrize("case", cases(), ids=str)
def test_golden(case: Case) -> None:
    check_case(case)
