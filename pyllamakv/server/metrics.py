"""The server's Prometheus metrics, in a registry of its own (one per app).

Counters for requests (by endpoint and status; a client that went away is a
cancellation, status 499, not an error), prompt and generated tokens,
speculative decoding's drafted and accepted tokens and verification passes,
and the bytes of SSE events sent; gauges for the queue and the slots, read
when scraped; and each slot's KV cache figures from its last kv_stats()
snapshot (taken by the slot's own thread after each request, since a context
is used by one thread at a time): pool, ring and resident bytes, resident
chunks, and the host-to-device bytes streamed; for a model with an MTP block,
whether each slot's block is on and the K/V rows it has computed (a slot runs
it only for requests that draft with it). Histograms, with buckets up to 600 s
(a long generation on a CPU): request time, and per job the time to its first
token (queueing included), its prefill (from a slot taking it to the first
token), its decode (first token to last) and its mean time between tokens.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .slots import Job, SlotPool

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
           120.0, 300.0, 600.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0,
                 10.0, 60.0, 600.0)

_KV_GAUGES = (("pool_bytes", "device KV pool bytes"), ("ring_bytes", "transfer ring bytes"),
              ("resident_bytes", "KV bytes resident in the pool"))
_KV_COUNTERS = (("bytes_streamed", "KV bytes streamed host -> device"),
                ("bytes_written_back", "KV bytes written through device -> host"),
                ("copies", "KV span copies"), ("replans", "residency re-plans"))


class _KVCollector:
    def __init__(self, pool: SlotPool):
        self.pool = pool

    def collect(self):
        fams = {k: GaugeMetricFamily(f"pyllamakv_kv_{k}", d, labels=["slot"])
                for k, d in _KV_GAUGES}
        fams.update({k: CounterMetricFamily(f"pyllamakv_kv_{k}", d, labels=["slot"])
                     for k, d in _KV_COUNTERS})
        chunks = GaugeMetricFamily("pyllamakv_kv_resident_chunks",
                                   "KV chunks resident in the pool, all layers", labels=["slot"])
        mtp_on = GaugeMetricFamily("pyllamakv_mtp_on", "the slot's MTP block runs beside the "
                                   "trunk (speculative.type mtp)", labels=["slot"])
        mtp_rows = CounterMetricFamily("pyllamakv_mtp_rows", "K/V rows the slot's MTP block "
                                       "computed", labels=["slot"])
        for s in self.pool.slots:
            st, label = s.kv_stats, [str(s.index)]
            for k, fam in fams.items():
                if k in st:
                    fam.add_metric(label, float(st[k]))
            if "resident_chunks" in st:
                chunks.add_metric(label, float(sum(st["resident_chunks"])))
            if s.mtp_stats:
                mtp_on.add_metric(label, float(s.mtp_stats["on"]))
                mtp_rows.add_metric(label, float(s.mtp_stats["rows_computed"]))
        yield from fams.values()
        yield chunks
        if any(s.mtp_stats for s in self.pool.slots):
            yield mtp_on
            yield mtp_rows


class Metrics:
    def __init__(self, pool: SlotPool):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("pyllamakv_requests", "HTTP requests answered",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("pyllamakv_request_seconds", "request time, queueing included",
                                 ["endpoint"], registry=r, buckets=BUCKETS)
        self.ttft = Histogram("pyllamakv_time_to_first_token_seconds", "arrival to the first "
                              "sampled token, queueing included", registry=r, buckets=BUCKETS)
        self.prefill = Histogram("pyllamakv_prefill_seconds", "a slot taking the job to its "
                                 "first token (prompt evaluation)", registry=r, buckets=BUCKETS)
        self.decode = Histogram("pyllamakv_decode_seconds", "first token to last",
                                registry=r, buckets=BUCKETS)
        self.inter_token = Histogram("pyllamakv_inter_token_seconds", "a job's mean time "
                                     "between two tokens", registry=r, buckets=TOKEN_BUCKETS)
        self.prompt_tokens = Counter("pyllamakv_prompt_tokens", "prompt tokens of requests run",
                                     registry=r)
        self.generated_tokens = Counter("pyllamakv_generated_tokens", "tokens sampled",
                                        registry=r)
        self.sse_bytes = Counter("pyllamakv_sse_bytes", "bytes of server-sent events sent",
                                 registry=r)
        self.cancelled = Counter("pyllamakv_cancelled_requests",
                                 "requests stopped because the client went away", registry=r)
        # speculative decoding, llama-server's three counters under this server's prefix
        self.drafted = Counter("pyllamakv_spec_decode_num_draft_tokens",
                               "speculative: draft tokens verified", registry=r)
        self.accepted = Counter("pyllamakv_spec_decode_num_accepted_tokens",
                                "speculative: draft tokens accepted by the target model",
                                registry=r)
        self.verified = Counter("pyllamakv_spec_decode_num_drafts",
                                "speculative: verification passes", registry=r)
        Gauge("pyllamakv_queue_length", "requests waiting for a slot",
              registry=r).set_function(lambda: pool.queue_length)
        Gauge("pyllamakv_slots_busy", "slots generating now",
              registry=r).set_function(lambda: pool.busy)
        Gauge("pyllamakv_slots", "slots (--parallel)",
              registry=r).set_function(lambda: len(pool.slots))
        r.register(_KVCollector(pool))

    def job_done(self, job: Job) -> None:
        """The pool's on_done hook (runs in the slot's thread)."""
        self.prompt_tokens.inc(job.prompt_tokens)
        self.generated_tokens.inc(job.generated_tokens)
        self.drafted.inc(job.drafted_tokens)
        self.accepted.inc(job.accepted_tokens)
        self.verified.inc(job.verify_passes)
        if job.cancelled:
            self.cancelled.inc()
        if job.t_first is not None:
            self.ttft.observe(job.t_first - job.t_start)
            if job.t_run is not None:
                self.prefill.observe(job.t_first - job.t_run)
            self.decode.observe(job.t_last - job.t_first)
            if job.generated_tokens > 1:
                self.inter_token.observe((job.t_last - job.t_first) / (job.generated_tokens - 1))

    def request_done(self, endpoint: str, status: int, seconds: float) -> None:
        """Every answered request (observe.py); generation ones also get their time."""
        self.requests.labels(endpoint, str(status)).inc()
        if status < 400:
            self.latency.labels(endpoint).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
