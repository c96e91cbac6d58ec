"""The union of HdrHistogram interval logs, read by HdrHistogram's own
Python implementation (hdrh), not by megaconn: every interval with the
given tag from every file added into one histogram.

usage: hdr_union.py TAG FILE...   -> JSON {"count", "p50_us", "p99_us", "p98_9_us", "p99_1_us", "max_us"}
"""
import json
import sys

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

MAX_US = 3_600_000_000


def main():
    tag, files = sys.argv[1], sys.argv[2:]
    total = HdrHistogram(1, MAX_US, 3)
    intervals = 0
    for f in files:
        reader = HistogramLogReader(f, HdrHistogram(1, MAX_US, 3))
        while True:
            h = reader.get_next_interval_histogram()
            if h is None:
                break
            if h.get_tag() == tag:
                total.add(h)
                intervals += 1
        reader.close()
    print(json.dumps({
        "intervals": intervals,
        "count": total.get_total_count(),
        "p50_us": total.get_value_at_percentile(50),
        "p99_us": total.get_value_at_percentile(99),
        # Implementations round a percentile's rank to a sample differently;
        # where the tail is sparse one sample apart is many buckets apart.
        "p98_9_us": total.get_value_at_percentile(98.9),
        "p99_1_us": total.get_value_at_percentile(99.1),
        "max_us": total.get_max_value(),
    }))


if __name__ == "__main__":
    main()
