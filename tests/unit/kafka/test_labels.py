"""A label's event id: one person's repeat is one event, two people's labels are two."""

from __future__ import annotations

from services.kafka.labels import label_event


def test_a_labels_id_is_what_it_says_and_who_said_it() -> None:
    ann = label_event("t1", "polite", False, "rude", "ann")
    assert ann.event_id == label_event("t1", "polite", False, "rude", "ann").event_id
    assert ann.event_id.startswith("label:") and len(ann.event_id) == len("label:") + 24
    others = [
        label_event("t1", "polite", False, "rude", "bob"),
        label_event("t1", "polite", True, "rude", "ann"),
        label_event("t1", "polite", False, None, "ann"),
        label_event("t2", "polite", False, "rude", "ann"),
        label_event("t1", "kind", False, "rude", "ann"),
    ]
    assert len({ann.event_id, *(o.event_id for o in others)}) == 6
    assert (ann.trial_id, ann.judge_id, ann.passed, ann.note, ann.labeller) == (
        "t1",
        "polite",
        False,
        "rude",
        "ann",
    )
