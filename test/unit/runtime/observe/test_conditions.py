from datetime import datetime, timedelta, timezone

import pytest

from kaiwo_ctrl.runtime.observe.conditions import (
    MESSAGE_LIMIT,
    TRUNCATION_MARKER,
    bound_message,
    find_condition,
    format_time,
    is_true,
    quote_value,
    remove_condition,
    set_condition,
)

T0 = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)


def test_insert_sets_all_fields_and_transition_time():
    conds: list[dict] = []
    assert set_condition(conds, "Ready", "Unknown", "Reconciling", "working on it", 3, T0) is True
    assert conds == [
        {
            "type": "Ready",
            "status": "Unknown",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-03-04T05:06:07Z",
            "reason": "Reconciling",
            "message": "working on it",
        }
    ]


def test_identical_set_is_not_a_change():
    conds: list[dict] = []
    set_condition(conds, "Ready", "True", "Done", "ok", 1, T0)
    snapshot = [dict(c) for c in conds]
    assert set_condition(conds, "Ready", "True", "Done", "ok", 1, T1) is False
    assert conds == snapshot


def test_transition_time_moves_only_when_status_flips():
    conds: list[dict] = []
    set_condition(conds, "Ready", "False", "Waiting", "a", 1, T0)
    # reason/message/generation change: changed, but transition time kept
    assert set_condition(conds, "Ready", "False", "StillWaiting", "b", 2, T1) is True
    c = find_condition(conds, "Ready")
    assert c["lastTransitionTime"] == "2026-03-04T05:06:07Z"
    assert (c["reason"], c["message"], c["observedGeneration"]) == ("StillWaiting", "b", 2)
    # status flip: transition time is now
    assert set_condition(conds, "Ready", "True", "Done", "", 2, T1) is True
    assert c["lastTransitionTime"] == "2026-03-04T05:11:07Z"
    assert c["status"] == "True"
    assert len(conds) == 1


def test_existing_condition_without_transition_time_gets_one():
    conds = [{"type": "Ready", "status": "True", "reason": "Done", "message": "", "observedGeneration": 1}]
    assert set_condition(conds, "Ready", "True", "Done", "", 1, T0) is True
    assert conds[0]["lastTransitionTime"] == "2026-03-04T05:06:07Z"


def test_time_format_is_utc_seconds_with_z():
    cet = timezone(timedelta(hours=1))
    assert format_time(datetime(2026, 1, 1, 1, 0, 0, 999999, tzinfo=cet)) == "2026-01-01T00:00:00Z"
    with pytest.raises(ValueError, match="now"):
        format_time(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="now"):
        set_condition([], "Ready", "True", "Done", "", 0, datetime(2026, 1, 1))


def test_types_are_kept_separately_and_found():
    conds: list[dict] = []
    set_condition(conds, "Ready", "True", "Done", "", 1, T0)
    set_condition(conds, "example.com/Degraded", "False", "AsExpected", "", 1, T0)
    assert [c["type"] for c in conds] == ["Ready", "example.com/Degraded"]
    assert find_condition(conds, "example.com/Degraded")["status"] == "False"
    assert find_condition(conds, "Missing") is None
    assert find_condition(None, "Ready") is None


def test_is_true():
    conds: list[dict] = []
    assert is_true(conds, "Ready") is False
    assert is_true(None, "Ready") is False
    set_condition(conds, "Ready", "Unknown", "Pending", "", 0, T0)
    assert is_true(conds, "Ready") is False
    set_condition(conds, "Ready", "False", "Failed", "", 0, T0)
    assert is_true(conds, "Ready") is False
    set_condition(conds, "Ready", "True", "Done", "", 0, T0)
    assert is_true(conds, "Ready") is True


def test_remove_condition():
    conds: list[dict] = []
    set_condition(conds, "A", "True", "R", "", 0, T0)
    set_condition(conds, "B", "True", "R", "", 0, T0)
    same_list = conds
    assert remove_condition(conds, "A") is True
    assert conds is same_list
    assert [c["type"] for c in conds] == ["B"]
    assert remove_condition(conds, "A") is False


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"type": ""}, "type"),
        ({"type": "x" * 317}, "type"),
        ({"type": "Has Space"}, "type"),
        ({"type": "Example.com/Ready"}, "type"),  # prefix must be lower-case DNS
        ({"type": "-Ready"}, "type"),
        ({"status": "true"}, "status"),
        ({"status": "Yes"}, "status"),
        ({"reason": ""}, "reason"),
        ({"reason": "1Starts"}, "reason"),
        ({"reason": "Has Space"}, "reason"),
        ({"reason": "Has-Dash"}, "reason"),
        ({"reason": "EndsWith:"}, "reason"),
        ({"reason": "A" * 1025}, "reason"),
        ({"message": None}, "message"),
        ({"observed_generation": -1}, "observedGeneration"),
        ({"observed_generation": 1.5}, "observedGeneration"),
    ],
)
def test_validation_names_the_field(kwargs, field):
    args = dict(type="Ready", status="True", reason="Done", message="", observed_generation=0, now=T0)
    args.update(kwargs)
    conds: list[dict] = []
    with pytest.raises(ValueError) as err:
        set_condition(conds, **args)
    assert str(err.value).startswith(field + ":")
    assert conds == []


@pytest.mark.parametrize(
    "type_,reason",
    [
        ("Ready", "A"),
        ("example.com/Ready", "Some_Reason,With:Parts_"),
        ("x" * 316, "R" * 1024),
        ("Pod.Scheduled-OK", "r2"),
    ],
)
def test_validation_accepts_edge_values(type_, reason):
    conds: list[dict] = []
    assert set_condition(conds, type_, "True", reason, "m" * 300, 0, T0) is True


@pytest.mark.parametrize("length", [0, 1, MESSAGE_LIMIT - 1, MESSAGE_LIMIT, MESSAGE_LIMIT + 1, 32769, 10**6])
def test_long_messages_are_cut_with_a_marker(length):
    conds: list[dict] = []
    message = "m" * length
    assert set_condition(conds, "Ready", "False", "Bad", message, 0, T0) is True
    stored = conds[0]["message"]
    assert len(stored) <= MESSAGE_LIMIT
    if length <= MESSAGE_LIMIT:
        assert stored == message
    else:
        assert stored.endswith(TRUNCATION_MARKER) and stored.startswith("m" * 100)
    # setting the same long message again changes nothing (no status write loop)
    assert set_condition(conds, "Ready", "False", "Bad", message, 0, T0) is False


def test_quote_value_bounds_user_strings():
    assert quote_value("q") == "'q'"
    quoted = quote_value("x" * 10_000)
    assert len(quoted) <= 128 and quoted.endswith(TRUNCATION_MARKER)
    assert bound_message("abcdef", 3) == "abc"  # a limit below the marker's length cuts plainly
