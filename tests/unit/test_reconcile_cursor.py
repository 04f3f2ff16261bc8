"""The reconcile cursor encoding kept from the original (`state:jmap:since`)."""

from messageweave.mail.reconcile import Replay, Walk, encode_walk, parse_cursor


def test_a_walk_cursor_round_trips_with_any_state() -> None:
    for state in ("s1", "a:b:c", "état", ""):
        cursor = encode_walk(state, 250)
        assert cursor.startswith("baseline:")
        assert parse_cursor(cursor) == Walk(state, 250)


def test_the_position_is_read_after_the_last_colon() -> None:
    assert encode_walk("ab", 7) == "baseline:6162:7"
    assert parse_cursor("baseline:6162:10000") == Walk("ab", 10000)


def test_any_other_string_is_a_replay_state() -> None:
    assert parse_cursor("12345") == Replay("12345")
    assert parse_cursor("J4:5") == Replay("J4:5")


def test_a_baseline_cursor_that_does_not_decode_starts_a_new_baseline() -> None:
    for broken in ("baseline:zz:1", "baseline:6162", "baseline:6162:x", "baseline:ff:1"):
        assert parse_cursor(broken) is None
