#!/usr/bin/env python3
"""One row of bench/mqtt_vs_mosquitto.sh's qos1 table, from the two
megaconn client runs' JSON summaries (publishers, subscribers).

Usage: mqtt_qos1_table.py NAME HOLD_S CPU_TICKS CLK_TCK PUB.json SUB.json
Prints one line: messages published and PUBACKed, delivered at the
subscribers, delivered per second over the publishers' ramp and hold (their
publishes start with the ramp), duplicates,
gaps, the PUBACK round trip p99, the delivery p99 (publish stamp to
receipt; "-" when the subscribers recorded none), and the broker's CPU
seconds over the publishing, and those per delivered message.
"""
import json
import sys


def summary(path):
    with open(path) as f:
        return json.load(f)["summary"]


def main():
    name, hold, ticks, tck, pub_path, sub_path = sys.argv[1:7]
    pub, sub = summary(pub_path), summary(sub_path)
    # Requests start with the ramp: the publishing lasted ramp + hold.
    seconds = (pub.get("ramp_seconds") or 0) + (pub.get("hold_seconds") or float(hold))
    push = sub["push"]
    sent = pub["requests_sent"]
    acked = pub["requests"]["latency_ms"]["count"]
    received = push["received"]
    lat = push["latency_ms"]
    delivery_p99 = "%.2f ms" % lat["p99_ms"] if lat["count"] else "-"
    print(
        "%-10s published %9d  PUBACKed %9d  delivered %9d (%8.0f/s)  dup %d  gaps %d  "
        "PUBACK p99 %.2f ms  delivery p99 %s  broker CPU %.1f s  %.1f us per delivered"
        % (name, sent, acked, received, received / seconds, push["duplicates"], push["gaps"],
           pub["requests"]["latency_ms"]["p99_ms"], delivery_p99, int(ticks) / int(tck),
           int(ticks) / int(tck) * 1e6 / max(1, received))
    )


if __name__ == "__main__":
    main()
