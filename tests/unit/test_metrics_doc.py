"""docs/reference.md §8 must name every metric series `/metrics` can expose, and no other
(issue #38 item 6: three series were missing and nothing looked), each with its labels."""

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from messageweave.ops import metrics
from messageweave.store.opstats import StreamGauges

DOC = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text()


def _documented() -> dict[str, set[str]]:
    """Each series §8 names, with the labels of its row (the labels column's names, their
    values in parentheses left out)."""
    section = DOC.split("## 8. Metrics", 1)[1].split("\n## 9.", 1)[0]
    names: dict[str, set[str]] = {}
    for line in section.splitlines():
        if line.startswith("| `messageweave_"):
            cells = line.split("|")
            labels = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^()]*\)", "", cells[3])))
            for name in re.findall(r"`(messageweave_[a-z_]+)`", cells[1]):
                names[name] = labels
    return names


def _exposed() -> dict[str, set[str]]:
    """Every series name of a scrape with every optional value present, with its labels
    (a histogram's `le` left out: Prometheus adds it to every histogram)."""
    metrics.observe_reconcile(True, 1.0)  # the process registry's series exist from the start;
    # a labelled one once it has a label set: one each, at 0
    metrics.observe_ingest("reconcile", 0)
    metrics.observe_delivery("delivered", None, [])
    metrics.PEER_CALLS.labels(peer="jmap", result="ok")
    metrics.PEER_LATENCY.labels(peer="jmap")
    text = metrics.render(  # the scrape-time ones only when known: give them all
        revision=1, stored_revision=1,
        streams=[StreamGauges("stalwart:jmap", "default", 3, 1, 0),
                 StreamGauges("stalwart:jmap", "family", 1, 0, 0)], unknown_after_send=0,
        push_degraded=False, push_last_state_change_age_s=1.0, push_subscription_expires=2,
        push_way="eventsource", push_last_event_age_s=1.0, updates_way="polling",
    ).decode()
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        # prometheus_client adds `<counter>_created` (when the series was made) beside each
        if family.name.startswith("messageweave_") and not family.name.endswith("_created"):
            name = f"{family.name}_total" if family.type == "counter" else family.name
            names[name] = {label for sample in family.samples for label in sample.labels
                           if label != "le"}
    return names


def test_every_metric_series_is_in_the_reference_and_nothing_else() -> None:
    """Catches a series `/metrics` exposes that §8 does not name (an operator cannot look it
    up), or a row of §8 for a series that no longer exists."""
    exposed, documented = _exposed(), _documented()
    assert exposed.keys() - documented.keys() == set(), "exposed but not in reference §8"
    assert documented.keys() - exposed.keys() == set(), "in reference §8 but never exposed"


def test_every_metric_series_has_the_labels_the_reference_names() -> None:
    """Catches a label a series carries that its row of §8 does not name (an operator cannot
    tell what it means or how many series it makes), or a documented label it never has."""
    exposed, documented = _exposed(), _documented()
    assert {name: exposed[name] for name in documented} == documented
