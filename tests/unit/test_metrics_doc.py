"""docs/reference.md §8 must name every metric series `/metrics` can expose, and no other
(issue #38 item 6: three series were missing and nothing looked)."""

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from messageweave.ops import metrics
from messageweave.store.opstats import StreamStats

DOC = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text()


def _documented() -> set[str]:
    section = DOC.split("## 8. Metrics", 1)[1].split("\n## 9.", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `messageweave_"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`(messageweave_[a-z_]+)`", first_cell))
    return names


def _exposed() -> set[str]:
    """Every series name of a scrape with every optional value present."""
    metrics.observe_reconcile(True, 1.0)  # the process registry's series exist from the start;
    text = metrics.render(  # the scrape-time ones only when known: give them all
        revision=1, stored_revision=1,
        streams=[StreamStats("stalwart:jmap", 3, 1, 1, 0)], unknown_after_send=0,
        push_degraded=False, push_last_state_change_age_s=1.0, push_subscription_expires=2,
        push_way="eventsource", push_last_event_age_s=1.0, updates_way="polling",
    ).decode()
    names = set()
    for family in text_string_to_metric_families(text):
        # prometheus_client adds `<counter>_created` (when the series was made) beside each
        if family.name.startswith("messageweave_") and not family.name.endswith("_created"):
            names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def test_every_metric_series_is_in_the_reference_and_nothing_else() -> None:
    """Catches a series `/metrics` exposes that §8 does not name (an operator cannot look it
    up), or a row of §8 for a series that no longer exists."""
    exposed, documented = _exposed(), _documented()
    assert exposed - documented == set(), "exposed but not in reference §8"
    assert documented - exposed == set(), "in reference §8 but never exposed"
