"""Prometheus metrics: process counters the code increments, plus numbers read at scrape time.

Counters and histograms live in this module's own registry and move through the `observe_*`
functions (the pipeline, ingress and clients call them). Stream length, pending entries, DLQ
size, `unknown_after_send` and the configuration revision are read from Redis on each scrape,
so every instance reports the shared queues the same way.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from messageweave.store.opstats import StreamStats

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


def observe_ingest(source: str) -> None:
    """One event accepted into a stream (`jmap_push`, `reconcile`, `telegram_webhook`)."""
    EVENTS_INGESTED.labels(source=source).inc()


def observe_delivery(outcome: str, failure_class: str | None, latency_s: float) -> None:
    DELIVERIES.labels(outcome=outcome, failure_class=failure_class or "").inc()
    DELIVERY_LATENCY.labels(outcome=outcome).observe(max(latency_s, 0.0))


def observe_call(peer: str, latency_s: float, ok: bool) -> None:
    """One outbound call to `jmap`, `telegram` or `llm`."""
    PEER_CALLS.labels(peer=peer, result="ok" if ok else "error").inc()
    PEER_LATENCY.labels(peer=peer).observe(max(latency_s, 0.0))


def observe_reconcile(ok: bool, lag_s: float | None = None) -> None:
    RECONCILE_PASSES.labels(result="ok" if ok else "error").inc()
    if lag_s is not None:
        RECONCILE_LAG.set(lag_s)


def render(
    *,
    revision: int,
    stored_revision: int | None,
    streams: list[StreamStats],
    unknown_after_send: int | None,
    redis_up: bool = True,
) -> bytes:
    """The exposition text: process metrics plus a one-off registry of scrape-time values."""
    scrape = CollectorRegistry(auto_describe=True)
    Gauge("messageweave_redis_up", "1 when Redis answered this scrape.",
          registry=scrape).set(1 if redis_up else 0)
    Gauge("messageweave_config_revision", "Configuration revision live on this instance.",
          registry=scrape).set(revision)
    if stored_revision is not None:
        Gauge("messageweave_config_stored_revision", "Configuration revision stored in Redis.",
              registry=scrape).set(stored_revision)
    length = Gauge("messageweave_stream_length", "Entries in the stream.", ["stream"],
                   registry=scrape)
    pending = Gauge("messageweave_stream_pending", "Entries read but not acknowledged.",
                    ["stream"], registry=scrape)
    dlq = Gauge("messageweave_dlq_size", "Entries in the stream's dead-letter queue.",
                ["stream"], registry=scrape)
    for s in streams:
        length.labels(stream=s.stream).set(s.length)
        pending.labels(stream=s.stream).set(s.pending)
        dlq.labels(stream=s.stream).set(s.dlq)
    if unknown_after_send is not None:
        Gauge("messageweave_unknown_after_send", "Sends whose outcome is unknown.",
              registry=scrape).set(unknown_after_send)
    return generate_latest(REGISTRY) + generate_latest(scrape)
