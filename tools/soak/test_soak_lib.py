"""test_soak_lib.py — tools/soak/soak_lib.py against values worked out by hand (in the comments).

    python3 -m unittest tools/soak/test_soak_lib.py     (run by tests/test_server.c, server/soak_logic)
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_lib  # noqa: E402

METRICS = """# HELP entropix_requests_total Generation requests received.
# TYPE entropix_requests_total counter
entropix_requests_total 120
# TYPE entropix_decode_seconds_total counter
entropix_decode_seconds_total 3.250000
entropix_slots_busy 1
labelled{a="b"} 7
broken_line
not_a_number abc
"""

STATUS = """Name:\tserver
Umask:\t0022
VmPeak:\t  200000 kB
VmRSS:\t   11620 kB
RssAnon:\t    4000 kB
Threads:\t12
"""


class Percentile(unittest.TestCase):
    def test_nearest_rank(self):
        v = [5, 1, 4, 2, 3, 10, 9, 8, 7, 6]  # sorted 1..10
        self.assertEqual(soak_lib.percentile(v, 50), 5)   # ceil(0.5 * 10) = 5th
        self.assertEqual(soak_lib.percentile(v, 90), 9)   # 9th
        self.assertEqual(soak_lib.percentile(v, 99), 10)  # ceil(9.9) = 10th
        self.assertEqual(soak_lib.percentile([3.5], 99), 3.5)
        self.assertEqual(soak_lib.percentile(list(range(1, 201)), 99), 198)  # ceil(198.0) = 198th
        self.assertIsNone(soak_lib.percentile([], 50))


class Fit(unittest.TestCase):
    def test_exact_line(self):
        a, b = soak_lib.linear_fit([0, 60, 120, 180], [100, 101, 102, 103])
        self.assertAlmostEqual(a, 100.0)
        self.assertAlmostEqual(b, 1 / 60)

    def test_least_squares(self):
        # x 0,1,2,3; y 1,3,2,5: mean x 1.5, mean y 2.75; Sxy = (-1.5)(-1.75)+(-0.5)(0.25)+(0.5)(-0.75)+(1.5)(2.25)
        # = 2.625 - 0.125 - 0.375 + 3.375 = 5.5; Sxx = 5; slope 1.1, intercept 2.75 - 1.65 = 1.1
        a, b = soak_lib.linear_fit([0, 1, 2, 3], [1, 3, 2, 5])
        self.assertAlmostEqual(b, 1.1)
        self.assertAlmostEqual(a, 1.1)

    def test_too_few(self):
        self.assertEqual(soak_lib.linear_fit([5], [7]), (7, None))
        self.assertEqual(soak_lib.linear_fit([5, 5], [7, 9]), (8, None))

    def test_growth_per_hour_after_warmup(self):
        # the sample at 0 s (warm-up) is left out; 1024 KiB more every 1800 s is 2048 KiB an hour
        samples = [{"t_s": 0, "rss_kib": 5000}, {"t_s": 600, "rss_kib": 10000}, {"t_s": 2400, "rss_kib": 11024},
                   {"t_s": 4200, "rss_kib": 12048}, {"t_s": 4300, "rss_kib": None}]
        g, n = soak_lib.growth_per_hour(samples, "rss_kib", 60)
        self.assertEqual(n, 3)
        self.assertAlmostEqual(g, 2048.0)
        # an interval that starts inside the warm-up is left out, whenever it ends
        samples[1]["from_s"] = 0
        g, n = soak_lib.growth_per_hour(samples, "rss_kib", 60)
        self.assertEqual(n, 2)
        self.assertAlmostEqual(g, 2048.0)


class Parse(unittest.TestCase):
    def test_metrics(self):
        m = soak_lib.parse_metrics(METRICS)
        self.assertEqual(m, {"entropix_requests_total": 120.0, "entropix_decode_seconds_total": 3.25,
                             "entropix_slots_busy": 1.0, "labelled": 7.0})

    def test_status(self):
        self.assertEqual(soak_lib.parse_status(STATUS), (11620, 12))
        self.assertEqual(soak_lib.parse_status("Name:\tx\n"), (None, None))


class Summary(unittest.TestCase):
    REQUESTS = [{"kind": "plain", "latency_s": x, "outcome": "ok"} for x in (0.3, 0.1, 0.2)] + [
        {"kind": "plain", "latency_s": 9.0, "outcome": "http_503"},
        {"kind": "stream", "latency_s": 0.5, "outcome": "ok"},
        {"kind": "slow", "latency_s": 10.0, "outcome": "ok"},
        {"kind": "idle", "latency_s": 120.0, "outcome": "not_closed"},
        {"kind": "idle", "latency_s": 120.0, "outcome": "not_closed"}]

    def test_latency_row(self):
        row = soak_lib.latency_row(self.REQUESTS)
        # plain: the 503 is an error and not in the percentiles of 0.1, 0.2, 0.3
        self.assertEqual(row["plain"], {"n": 4, "errors": {"http_503": 1}, "p50": 0.2, "p90": 0.3, "p99": 0.3})
        self.assertEqual(row["idle"]["errors"], {"not_closed": 2})
        self.assertIsNone(row["idle"]["p50"])
        self.assertEqual(row["pool"], {"n": 0, "errors": {}, "p50": None, "p90": None, "p99": None})

    def test_summarize_leaks_and_errors(self):
        samples = [{"t_s": 30, "rss_kib": 1000, "threads": 9, "fds": 8},
                   {"t_s": 90, "rss_kib": 1100, "threads": 10, "fds": 8},
                   {"t_s": 150, "rss_kib": 1200, "threads": 9, "fds": 9}]
        base = {"threads": 6, "fds": 5, "rss_kib": 900,
                "metrics": {"entropix_slots_busy": 0, "entropix_requests_total": 10, "entropix_queue_length": 0}}
        final = {"threads": 7, "fds": 5, "rss_kib": 1200,
                 "metrics": {"entropix_slots_busy": 1, "entropix_requests_total": 15, "entropix_queue_length": 0,
                             "entropix_pool_memory_bytes": 0}}
        tally = soak_lib.Tally()
        for r in self.REQUESTS:
            tally.add(r["kind"], r["latency_s"], r["outcome"])
        s = soak_lib.summarize(samples, tally, base, final, warmup_s=60)
        # the fit over t 90, 150: 100 KiB a minute = 6000 KiB an hour
        self.assertAlmostEqual(s["rss_mib_per_hour"], 6000 / 1024)
        self.assertEqual(s["fit_points"], 2)
        self.assertEqual(s["n_errors"], 3)
        self.assertEqual(s["errors"], {"plain:http_503": 1, "idle:not_closed": 2})
        self.assertEqual(s["server_counters"]["entropix_requests_total"], 5)
        self.assertEqual(s["rss_kib"], {"first": 1000, "last": 1200, "max": 1200})
        self.assertEqual(s["findings"], ["1 slot(s) busy at rest", "threads: 6 before the load, 7 at rest after it",
                                         "2 error(s) idle:not_closed", "1 error(s) plain:http_503"])

    def test_floor_fit(self):
        # a pool's replicas held at the last sample (rss_kib 6000 KiB up) leave the floor flat: 0 an hour,
        # while the sampled values' line (0, 0, 6000 KiB at 0, 1800, 3600 s) rises 6000 KiB an hour
        samples = [{"t_s": t, "rss_kib": r, "rss_min_kib": 1000} for t, r in ((0, 1000), (1800, 1000), (3600, 7000))]
        s = soak_lib.summarize(samples, soak_lib.Tally(), None, None, warmup_s=0)
        self.assertAlmostEqual(s["rss_mib_per_hour"], 0.0)
        self.assertAlmostEqual(s["rss_sampled_mib_per_hour"], 6000 / 1024)
        self.assertNotIn("at_rest", s)

    def test_nothing_found(self):
        samples = [{"t_s": 90, "rss_kib": 1000, "threads": 6, "fds": 5}]
        rest = {"threads": 6, "fds": 5, "rss_kib": 1000,
                "metrics": {"entropix_slots_busy": 0, "entropix_queue_length": 0, "entropix_pool_memory_bytes": 0}}
        tally = soak_lib.Tally()
        tally.add("plain", 0.1, "ok")
        s = soak_lib.summarize(samples, tally, rest, rest, 60)
        self.assertEqual(s["findings"], [])
        self.assertIsNone(s["rss_mib_per_hour"])  # one point: no line


if __name__ == "__main__":
    unittest.main()
