"""Forgetting: each protection rule, the thresholds, and which rule wins."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram_core.forgetting import Action, Decision, ForgetSettings, Reason, decide, protection
from engram_core.model import Memory
from engram_core.tags import tag_prefixes

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
DAY = timedelta(days=1)
ON = ForgetSettings(archive_below=0.2, delete_below=0.1)


def old(tags: tuple[str, ...] = (), **kw: object) -> Memory:
    """An unprotected memory: ordinary type, middling importance, old, not edited lately."""
    fields: dict[str, object] = {
        "type": "Context",
        "importance": 0.4,
        "timestamp": NOW - 200 * DAY,
        "updated_at": NOW - 200 * DAY,
        **kw,
    }
    return Memory(
        id="m",
        tenant="t",
        content="x",
        tags=tags,
        tag_prefixes=tag_prefixes(tags),
        **fields,  # type: ignore[arg-type]
    )


def test_off_by_default() -> None:
    assert ForgetSettings().archive_below is None
    assert ForgetSettings().delete_below is None
    for m in (old(), old(archived=True)):
        assert decide(m, 0.0, NOW) == Decision(Action.KEEP, Reason.OFF)


def test_archive_below_the_threshold() -> None:
    assert decide(old(), 0.19, NOW, ON) == Decision(Action.ARCHIVE, Reason.BELOW_ARCHIVE)
    assert decide(old(), 0.05, NOW, ON) == Decision(Action.ARCHIVE, Reason.BELOW_ARCHIVE)
    assert decide(old(), 0.2, NOW, ON) == Decision(Action.KEEP, Reason.ABOVE_THRESHOLD)
    assert decide(old(), 0.9, NOW, ON).changes is False


def test_delete_only_what_is_already_archived() -> None:
    # Below the delete threshold but live: archived first, deleted on a later pass.
    assert decide(old(), 0.01, NOW, ON).action is Action.ARCHIVE
    archived = old(archived=True)
    assert decide(archived, 0.09, NOW, ON) == Decision(Action.DELETE, Reason.BELOW_DELETE)
    assert decide(archived, 0.1, NOW, ON) == Decision(Action.KEEP, Reason.ALREADY_ARCHIVED)
    assert decide(archived, 0.5, NOW, ON) == Decision(Action.KEEP, Reason.ALREADY_ARCHIVED)


def test_archive_without_delete() -> None:
    s = ForgetSettings(archive_below=0.2)
    assert decide(old(), 0.1, NOW, s).action is Action.ARCHIVE
    assert decide(old(archived=True), 0.0, NOW, s) == Decision(Action.KEEP, Reason.OFF)


def test_archiving_protects_from_delete_for_the_update_window() -> None:
    # The archive write sets updated_at: a freshly archived memory is not deleted yet.
    just_archived = old(archived=True, updated_at=NOW - 2 * DAY)
    assert decide(just_archived, 0.0, NOW, ON) == Decision(Action.KEEP, Reason.RECENTLY_UPDATED)
    assert decide(just_archived, 0.0, NOW + 27.9 * DAY, ON).action is Action.KEEP
    assert decide(just_archived, 0.0, NOW + 28.01 * DAY, ON).action is Action.DELETE
    no_grace = ForgetSettings(archive_below=0.2, delete_below=0.1, protect_updated_within_days=0)
    assert decide(just_archived, 0.0, NOW, no_grace).action is Action.DELETE


def test_restored_memory_is_protected_then_decays_again() -> None:
    restored = old(archived=False, updated_at=NOW - DAY)
    assert decide(restored, 0.0, NOW, ON) == Decision(Action.KEEP, Reason.RECENTLY_UPDATED)
    assert decide(restored, 0.0, NOW + 31 * DAY, ON).action is Action.ARCHIVE


# --- each protection rule ---------------------------------------------------------------


@pytest.mark.parametrize(
    "tags", [("pinned",), ("Protected",), ("pinned:legal",), ("project:x", "protected/keep")]
)
def test_protection_tag(tags: tuple[str, ...]) -> None:
    m = old(tags=tags)
    assert decide(m, 0.0, NOW, ON) == Decision(Action.KEEP, Reason.PROTECTED_FLAG)


def test_a_tag_that_merely_contains_the_word_does_not_protect() -> None:
    assert decide(old(tags=("project:pinned",)), 0.0, NOW, ON).action is Action.ARCHIVE
    assert decide(old(tags=("pinnedx",)), 0.0, NOW, ON).action is Action.ARCHIVE


def test_protection_tag_without_precomputed_prefixes() -> None:
    m = Memory(
        id="m",
        tenant="t",
        content="x",
        tags=("pinned:legal",),
        importance=0.4,
        timestamp=NOW - 200 * DAY,
        updated_at=NOW - 200 * DAY,
    )
    assert protection(m, NOW, ON) is Reason.PROTECTED_FLAG


@pytest.mark.parametrize(
    ("metadata", "protected"),
    [
        ({"pinned": True}, True),
        ({"protected": True}, True),
        ({"pinned": False}, False),
        ({"pinned": "true"}, False),  # only the JSON value true is a deliberate flag
        ({"pinned": 1}, False),
        ({"other": True}, False),
    ],
)
def test_protection_metadata(metadata: dict[str, object], protected: bool) -> None:
    got = decide(old(metadata=metadata), 0.0, NOW, ON)
    assert got.action is (Action.KEEP if protected else Action.ARCHIVE)


def test_flags_are_settings() -> None:
    s = ForgetSettings(archive_below=0.2, protect_tags=("keep",), protect_metadata_keys=("hold",))
    assert decide(old(tags=("keep",)), 0.0, NOW, s).reason is Reason.PROTECTED_FLAG
    assert decide(old(metadata={"hold": True}), 0.0, NOW, s).reason is Reason.PROTECTED_FLAG
    assert decide(old(tags=("pinned",)), 0.0, NOW, s).action is Action.ARCHIVE


@pytest.mark.parametrize("type_", ["Decision", "Insight", "MetaPattern"])
def test_protected_types(type_: str) -> None:
    assert decide(old(type=type_), 0.0, NOW, ON) == Decision(Action.KEEP, Reason.PROTECTED_TYPE)


def test_protected_types_are_a_setting() -> None:
    s = ForgetSettings(archive_below=0.2, protected_types=frozenset({"Habit"}))
    assert decide(old(type="Decision"), 0.0, NOW, s).action is Action.ARCHIVE
    assert decide(old(type="Habit"), 0.0, NOW, s).reason is Reason.PROTECTED_TYPE


def test_importance_threshold_is_inclusive() -> None:
    assert decide(old(importance=0.7), 0.0, NOW, ON) == Decision(Action.KEEP, Reason.IMPORTANT)
    assert decide(old(importance=0.69), 0.0, NOW, ON).action is Action.ARCHIVE
    s = ForgetSettings(archive_below=0.2, protect_importance=0.5)
    assert decide(old(importance=0.55), 0.0, NOW, s).reason is Reason.IMPORTANT


def test_young_by_timestamp() -> None:
    young = old(timestamp=NOW - 29 * DAY)
    assert decide(young, 0.0, NOW, ON) == Decision(Action.KEEP, Reason.YOUNG)
    assert decide(old(timestamp=NOW - 31 * DAY), 0.0, NOW, ON).action is Action.ARCHIVE
    s = ForgetSettings(archive_below=0.2, protect_younger_than_days=7)
    assert decide(young, 0.0, NOW, s).action is Action.ARCHIVE


def test_future_timestamp_counts_as_young() -> None:
    assert decide(old(timestamp=NOW + DAY), 0.0, NOW, ON).reason is Reason.YOUNG


# --- precedence -----------------------------------------------------------------------------


def test_protection_order_names_the_strongest_reason() -> None:
    everything = old(
        tags=("pinned",),
        type="Decision",
        importance=0.9,
        timestamp=NOW - DAY,
        updated_at=NOW - DAY,
    )
    assert protection(everything, NOW, ON) is Reason.PROTECTED_FLAG
    no_flag = old(type="Decision", importance=0.9, timestamp=NOW - DAY, updated_at=NOW - DAY)
    assert protection(no_flag, NOW, ON) is Reason.PROTECTED_TYPE
    no_type = old(importance=0.9, timestamp=NOW - DAY, updated_at=NOW - DAY)
    assert protection(no_type, NOW, ON) is Reason.IMPORTANT
    assert protection(old(timestamp=NOW - DAY, updated_at=NOW - DAY), NOW, ON) is Reason.YOUNG
    assert protection(old(updated_at=NOW - DAY), NOW, ON) is Reason.RECENTLY_UPDATED
    assert protection(old(), NOW, ON) is None


def test_protection_beats_delete() -> None:
    archived_pinned = old(archived=True, tags=("pinned",))
    assert decide(archived_pinned, 0.0, NOW, ON) == Decision(Action.KEEP, Reason.PROTECTED_FLAG)
    archived_decision = old(archived=True, type="Decision")
    assert decide(archived_decision, 0.0, NOW, ON).action is Action.KEEP


def test_a_broken_score_changes_nothing() -> None:
    for bad in (float("nan"), float("inf"), float("-inf")):
        assert decide(old(), bad, NOW, ON) == Decision(Action.KEEP, Reason.BAD_SCORE)


@pytest.mark.parametrize(
    "bad",
    [
        {"delete_below": 0.1},  # delete without archive
        {"archive_below": 0.1, "delete_below": 0.2},  # delete above archive
        {"archive_below": 1.5},
        {"archive_below": float("nan")},
        {"protect_importance": -1.0},
        {"protect_younger_than_days": float("inf")},
        {"protect_updated_within_days": -1.0},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"."):
        ForgetSettings(**bad)  # type: ignore[arg-type]
