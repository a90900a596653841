"""kafka-python puts a group's own error in its description instead of raising it; the
ones a cluster recovers from by itself (a coordinator moving after a broker loss) must be
tried again, not shown as a group with no members."""

from __future__ import annotations

import pytest
from kafka.errors import CoordinatorLoadInProgressError, NotCoordinatorError, for_code

from services.cli.status import _raise_if_moving


def described(code: int) -> dict:  # type: ignore[type-arg]
    # what kafka-python 3's describe_groups returns for a group with an error code
    return {
        "group_id": "passk.gate",
        "group_state": "",
        "members": [],
        "error": str(for_code(code)("")) if code else None,
    }


@pytest.mark.parametrize(
    "code, error", [(16, NotCoordinatorError), (14, CoordinatorLoadInProgressError)]
)
def test_a_moving_coordinator_is_raised_to_be_retried(code: int, error: type) -> None:
    with pytest.raises(error):
        _raise_if_moving(described(code))


@pytest.mark.parametrize("code", [0, 30])  # no error; GROUP_AUTHORIZATION_FAILED stays shown
def test_no_error_or_a_lasting_one_is_left_to_the_description(code: int) -> None:
    _raise_if_moving(described(code))
