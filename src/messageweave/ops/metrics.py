"""Prometheus metrics: process counters the code increments, plus numbers read at scrape time.

Counters and histograms live in this module's own registry and move through the `observe_*`
functions (the pipeline, the ingress, the mail loops and the clients call them; `mail/` may,
since `ops/` sits below it). Stream length, pending entries, DLQ size, `unknown_after_send`,
the configuration revision and the push lifecycle (degraded, last StateChange age,
subscription expiry) are read from Redis on each scrape, so every instance reports the shared
state the same way; the stream gauges cover every account's mail stream (issue #35).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from messageweave.store.account_keys import DEFAULT_ACCOUNT
from messageweave.store.opstats import StreamGauges

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

REGISTRY = CollectorRegistry(auto_describe=True)

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)

EVENTS_INGESTED = Counter(
    "messageweave_events_ingested_total", "Events accepted into a stream, by source.",
    ["source"], registry=REGISTRY,
)
DELIVERIES = Counter(
    "messageweave_deliveries_total", "Delivery attempts, by outcome and failure class.",
    ["outcome", "failure_class"], registry=REGISTRY,
)
DELIVERY_LATENCY = Histogram(
    "messageweave_delivery_latency_seconds",
    "From the event entering its stream to the delivery attempt's end.",
    ["outcome"], buckets=_LATENCY_BUCKETS, registry=REGISTRY,
)
PEER_CALLS = Counter(
    "messageweave_peer_calls_total", "Outbound calls to JMAP, Telegram and the LLM.",
    ["peer", "result"], registry=REGISTRY,
)
PEER_LATENCY = Histogram(
    "messageweave_peer_call_seconds", "Outbound call latency.", ["peer"], registry=REGISTRY,
)
RECONCILE_PASSES = Counter(
    "messageweave_reconcile_passes_total", "Reconcile passes, by result.", ["result"],
    registry=REGISTRY,
)
RECONCILE_LAG = Gauge(
    "messageweave_reconcile_lag_seconds", "Time since the last successful reconcile pass ended "
    "at the moment it was recorded (set by the reconcile pass).", registry=REGISTRY,
)
# `unclaimed`: discovery never enqueued the mail; `lost`: its entry left the stream unfinished.
GAP_AUDIT_REASONS = ("unclaimed", "lost")
GAP_AUDIT_MISSING = Counter(
    "messageweave_gap_audit_missing_total", "Mails the gap auditor found missing (never "
    "notified and owned by nobody), by reason.", ["reason"], registry=REGISTRY,
)
for _reason in GAP_AUDIT_REASONS:
    GAP_AUDIT_MISSING.labels(reason=_reason)  # every series exists from the start, at 0


@functools.cache
def _series(metric: Counter | Histogram, *values: str) -> Any:
    """`metric.labels(*values)`, looked up once per label set (each set is one of a few fixed
    names): `labels()` takes a lock and builds its key on every call, and the webhook and the
    worker count every update (issue #26)."""
    return metric.labels(*values)


def observe_ingest(source: str, count: int = 1) -> None:
    """Events accepted into a stream (`jmap_push`, `reconcile`, `telegram_webhook`,
    `telegram_polling`)."""
    _series(EVENTS_INGESTED, source).inc(count)


def observe_delivery(outcome: str, failure_class: str | None,
                     latencies_s: Iterable[float]) -> None:
    """Deliveries of one outcome and failure class, one latency each (the attempt's, or the
    time since the event entered its stream)."""
    latency = _series(DELIVERY_LATENCY, outcome)
    count = 0
    for latency_s in latencies_s:
        latency.observe(max(latency_s, 0.0))
        count += 1
    _series(DELIVERIES, outcome, failure_class or "").inc(count)


def observe_call(peer: str, latency_s: float, ok: bool) -> None:
    """One outbound call to `jmap`, `telegram` or `llm`."""
    PEER_CALLS.labels(peer=peer, result="ok" if ok else "error").inc()
    PEER_LATENCY.labels(peer=peer).observe(max(latency_s, 0.0))


def observe_gap_audit_missing(reason: str, count: int = 1) -> None:
    """`count` mails found missing by one audit, for `reason` (`unclaimed` or `lost`)."""
    if count > 0:
        GAP_AUDIT_MISSING.labels(reason=reason).inc(count)


def observe_reconcile(ok: bool, lag_s: float | None = None) -> None:
    RECONCILE_PASSES.labels(result="ok" if ok else "error").inc()
    if lag_s is not None:
        RECONCILE_LAG.set(lag_s)


_STREAM_GAUGES = (
    ("messageweave_stream_length", "Entries in the stream."),
    ("messageweave_stream_pending", "Entries read but not acknowledged."),
    ("messageweave_dlq_size", "Entries in the stream's dead-letter queue."),
)


class _StreamSeries(Collector):
    """The stream gauges of one scrape, one series per stream. `default`'s mail stream and the
    chat stream keep the series they had before accounts (`stream` alone), so a one-mailbox
    deployment's scrape is unchanged; another account's mail stream adds `account` (reference
    §8)."""

    def __init__(self, streams: list[StreamGauges]) -> None:
        self._streams = streams

    def collect(self) -> Iterable[GaugeMetricFamily]:
        families = [GaugeMetricFamily(name, help_text) for name, help_text in _STREAM_GAUGES]
        for s in self._streams:
            labels = {"stream": s.stream}
            if s.account is not None and s.account != DEFAULT_ACCOUNT:
                labels["account"] = s.account
            for family, value in zip(families, (s.length, s.pending, s.dlq), strict=True):
                family.add_sample(family.name, labels, value)
        return families


def render(
    *,
    revision: int,
    stored_revision: int | None,
    streams: list[StreamGauges],
    unknown_after_send: int | None,
    redis_up: bool = True,
    push_degraded: bool | None = None,
    push_last_state_change_age_s: float | None = None,
    push_subscription_expires: int | None = None,
    push_way: str | None = None,
    push_last_event_age_s: float | None = None,
    updates_way: str | None = None,
) -> bytes:
    """The exposition text: process metrics plus a one-off registry of scrape-time values.
    The push values are left out when unknown (Redis down; no StateChange yet; no
    registration, or a subscription without an expiry)."""
    scrape = CollectorRegistry(auto_describe=True)
    Gauge("messageweave_redis_up", "1 when Redis answered this scrape.",
          registry=scrape).set(1 if redis_up else 0)
    Gauge("messageweave_config_revision", "Configuration revision live on this instance.",
          registry=scrape).set(revision)
    if stored_revision is not None:
        Gauge("messageweave_config_stored_revision", "Configuration revision stored in Redis.",
              registry=scrape).set(stored_revision)
    scrape.register(_StreamSeries(streams))
    if unknown_after_send is not None:
        Gauge("messageweave_unknown_after_send", "Sends whose outcome is unknown.",
              registry=scrape).set(unknown_after_send)
    if push_degraded is not None:
        Gauge("messageweave_push_degraded", "1 while the push push_mode wants (EventSource or "
              "a PushSubscription) is not working.", registry=scrape).set(
                  1 if push_degraded else 0)
    if push_way is not None:
        Gauge("messageweave_push_in_force", "1 for the push that brings mail now "
              "(eventsource, subscription, off).", ["way"], registry=scrape).labels(
                  way=push_way).set(1)
    if push_last_event_age_s is not None:
        Gauge("messageweave_push_last_event_age_seconds",
              "Seconds since the push in force last sent anything (an EventSource ping or "
              "state event, a StateChange).", registry=scrape).set(max(push_last_event_age_s, 0.0))
    if updates_way is not None:
        Gauge("messageweave_telegram_updates_in_force", "1 for the way Telegram's updates "
              "arrive now (polling, webhook, degraded, off).", ["way"], registry=scrape).labels(
                  way=updates_way).set(1)
    if push_last_state_change_age_s is not None:
        Gauge("messageweave_push_last_state_change_age_seconds",
              "Seconds since the last StateChange push was accepted.",
              registry=scrape).set(max(push_last_state_change_age_s, 0.0))
    if push_subscription_expires is not None:
        Gauge("messageweave_push_subscription_expiry_timestamp_seconds",
              "When the JMAP push subscription expires (Unix seconds).",
              registry=scrape).set(push_subscription_expires)
    return generate_latest(REGISTRY) + generate_latest(scrape)
