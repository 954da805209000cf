"""ServerMetrics: the server's counters and histograms, written as Prometheus text (no client library).

Request counts by endpoint and status, prompt and generated tokens, time to first token and time per
output token histograms, end-to-end latency; gauges read from the engine at scrape time (queue depth,
KV-cache use, prefix-cache hit rate, forced-token fraction) and the compile counters.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import Counter

__all__ = ["ServerMetrics", "Histogram"]

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Histogram:
    """Cumulative-bucket histogram in Prometheus' sense."""

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]):
        self.name, self.help, self.buckets = name, help_text, buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        total = 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            total += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{self.name}_bucket{{le="{le}"}} {total}')
        out += [f"{self.name}_sum {self.sum}", f"{self.name}_count {self.count}"]
        return out


class ServerMetrics:
    """Everything ``GET /metrics`` reports; updated by the request handlers (one event loop)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (endpoint, status code) -> count
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.compile_requests = 0
        self.compile_cache_hits = 0
        self.ttft = Histogram("guided_time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.tpot = Histogram("guided_time_per_output_token_seconds", "Time per output token after the first.",
                              TPOT_BUCKETS)  # fmt: skip
        self.e2e = Histogram("guided_request_latency_seconds", "End-to-end request latency.", E2E_BUCKETS)

    def request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1

    def finished(self, output, num_generated: int) -> None:
        """Record a finished engine request (a ``RequestOutput``) that generated ``num_generated`` tokens."""
        with self._lock:
            self.prompt_tokens += len(output.prompt_token_ids)
            self.generation_tokens += num_generated
            if output.first_token_time is not None:
                self.ttft.observe(max(output.first_token_time - output.arrival_time, 0.0))
                if output.finish_time is not None and num_generated > 1:
                    per_token = (output.finish_time - output.first_token_time) / (num_generated - 1)
                    self.tpot.observe(max(per_token, 0.0))
            if output.finish_time is not None:
                self.e2e.observe(max(output.finish_time - output.arrival_time, 0.0))

    def render(self, engine_stats: dict, compiler=None, in_flight: int = 0) -> str:
        """Prometheus text exposition of the counters, histograms and the engine's gauges."""
        lines = ["# HELP guided_requests_total HTTP requests by endpoint and status.",
                 "# TYPE guided_requests_total counter"]  # fmt: skip
        with self._lock:
            for (endpoint, status), n in sorted(self.requests.items()):
                lines.append(f'guided_requests_total{{endpoint="{endpoint}",status="{status}"}} {n}')
            lines += _counter("guided_prompt_tokens_total", "Prompt tokens processed.", self.prompt_tokens)
            lines += _counter("guided_generation_tokens_total", "Tokens generated.", self.generation_tokens)
            lines += _counter("guided_compile_requests_total", "Constraints submitted for compilation.",
                              self.compile_requests)  # fmt: skip
            lines += _counter("guided_compile_cache_hits_total", "Constraints already compiled or in flight.",
                              self.compile_cache_hits)  # fmt: skip
            for h in (self.ttft, self.tpot, self.e2e):
                lines += h.lines()
        if compiler is not None:
            lines += _counter("guided_compiles_started_total", "Compiles started.", compiler.compiles)
        s = engine_stats
        gauges = {
            "guided_requests_in_flight": ("Requests admitted by the server and not finished.", in_flight),
            "guided_num_requests_running": ("Sequences in the running batch.", s.get("num_running", 0)),
            "guided_num_requests_waiting": ("Sequences waiting to be scheduled.", s.get("num_waiting", 0)),
            "guided_num_requests_compiling": ("Requests waiting for their grammar.", s.get("num_pending_grammars", 0)),
            "guided_kv_cache_usage_ratio": ("Fraction of KV blocks in use.",
                                            1.0 - s.get("num_free_blocks", 0) / max(s.get("num_blocks", 1), 1)),
            "guided_prefix_cache_hit_rate": ("Prompt tokens served from the prefix cache.",
                                             s.get("prefix_cache_hit_rate", 0.0)),
            "guided_forced_token_fraction": ("Output tokens forced by grammars (fast-forward).",
                                             s.get("forced_fraction", 0.0)),
            "guided_num_preemptions": ("Preemptions so far.", s.get("num_preemptions", 0)),
            "guided_spec_acceptance_rate": ("Speculative decoding: draft tokens accepted / proposed.",
                                            s.get("spec_acceptance_rate", 0.0)),
            "guided_spec_mean_accepted_length": ("Speculative decoding: tokens per checked draft (accepted + 1).",
                                                 s.get("spec_mean_accepted_length", 1.0)),
        }  # fmt: skip
        for name, (help_text, value) in gauges.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]
        lines += _counter("guided_forced_tokens_total", "Output tokens forced by grammars.",
                          s.get("num_forced_tokens", 0))  # fmt: skip
        lines += _counter("guided_output_tokens_total", "Output tokens appended by the engine.",
                          s.get("num_output_tokens", 0))  # fmt: skip
        lines += _counter("guided_budget_tokens_refused_total", "Draws refused by the token budget (resampled).",
                          s.get("budget_tokens_refused", 0))  # fmt: skip
        lines += _counter("guided_budget_endings_total", "Outputs ended by their shortest completion.",
                          s.get("budget_rows_ended", 0))  # fmt: skip
        lines += _counter("guided_spec_draft_tokens_total", "Speculative decoding: draft tokens proposed.",
                          s.get("spec_draft_tokens", 0))  # fmt: skip
        lines += _counter("guided_spec_accepted_tokens_total", "Speculative decoding: draft tokens accepted.",
                          s.get("spec_accepted_tokens", 0))  # fmt: skip
        return "\n".join(lines) + "\n"


def _counter(name: str, help_text: str, value) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value}"]
