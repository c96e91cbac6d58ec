#!/usr/bin/env python3
"""The table and JSON of bench/mqtt_vs_loadgen.sh: one row per run (a load
generator against a broker at a QoS), from what the run left in its run
directory.

Usage: mqtt_loadgen_table.py RUN_DIR OUT.json TAG...
Each TAG has TAG.meta.json (written by the script: tool, broker, qos, the
load, the broker's CPU ticks over the run) and:
  megaconn: TAG-pub.json, TAG-sub.json (the two `megaconn client --json`
            summaries: publishers, subscribers) and TAG-pub.time,
            TAG-sub.time (`/usr/bin/time -f '%e %U %S'`);
  paho:     TAG.json (mqtt_paho_load -json) and TAG.time;
  mqtt-benchmark, pymqttbench: TAG.out (its stdout), TAG.time, and
            TAG-sub.json, TAG-sub.time (the subscribing megaconn client
            that counts what was delivered; not the tool's CPU).
Writes OUT.json (a list of rows, with how each tool measures) and prints
the table. Exits 1 when a run left no numbers (the script must not rot
into printing an empty table).
"""
import json
import os
import re
import sys

MEGACONN_MEASURES = (
    "publish: intended send time (open-loop schedule) to PUBACK, coordinated-omission corrected; "
    "delivery: intended send time (stamp in the payload) to receipt"
)


def load(path):
    with open(path) as f:
        return json.load(f)


def cpu_of(path):
    """User + system seconds of a process and the children it reaped."""
    with open(path) as f:
        last = [line for line in f.read().split("\n") if line.strip()][-1]
    _wall, user, system = (float(x) for x in last.split()[-3:])
    return user + system


def megaconn_row(run, tag, meta):
    pub = load(os.path.join(run, tag + "-pub.json"))["summary"]
    sub = load(os.path.join(run, tag + "-sub.json"))["summary"]
    qos = str(meta["qos"])
    published = pub.get("mqtt_published", {}).get(qos, 0)
    # QoS 0 publishes have no answer: no request latency (`requests` null).
    req = (pub.get("requests") or {}).get("latency_ms") or {"count": 0, "p50_ms": None, "p99_ms": None}
    acked = req["count"] if meta["qos"] > 0 else None
    # Open loop: the publishes go on a schedule of MSGS / RATE seconds
    # (late ones count as late, in the latency); what was sent over it.
    seconds = meta["messages"] / meta["rate_per_publisher"]
    push = sub["push"]
    lat = push["latency_ms"]
    received = sub.get("mqtt_received", {}).get(qos, push["received"])
    return {
        "published": published,
        "acknowledged": acked,
        "msgs_per_s": published / seconds,
        "publish_p50_ms": req["p50_ms"] if meta["qos"] > 0 else None,
        "publish_p99_ms": req["p99_ms"] if meta["qos"] > 0 else None,
        "received": received,
        "delivery_p50_ms": lat["p50_ms"] if lat["count"] else None,
        "delivery_p99_ms": lat["p99_ms"] if lat["count"] else None,
        "lost": sum(sub.get("mqtt_lost", {}).values()),
        "duplicated": sum(sub.get("mqtt_duplicated", {}).values()),
        "tool_cpu_s": cpu_of(os.path.join(run, tag + "-pub.time")) + cpu_of(os.path.join(run, tag + "-sub.time")),
        "measured_from": MEGACONN_MEASURES,
    }


def paho_row(run, tag, meta):
    r = load(os.path.join(run, tag + ".json"))
    qos1 = meta["qos"] > 0
    return {
        "published": r["published"],
        "acknowledged": r["publish_ms"]["count"] if qos1 else None,
        "msgs_per_s": r["msgs_per_s"],
        "publish_p50_ms": r["publish_ms"]["p50_ms"] if qos1 else None,
        "publish_p99_ms": r["publish_ms"]["p99_ms"] if qos1 else None,
        "received": r["received"],
        "delivery_p50_ms": r["delivery_ms"]["p50_ms"] if r["delivery_ms"]["count"] else None,
        "delivery_p99_ms": r["delivery_ms"]["p99_ms"] if r["delivery_ms"]["count"] else None,
        "lost": r["expected_received"] - r["received"],
        "duplicated": None,
        "tool_cpu_s": cpu_of(os.path.join(run, tag + ".time")),
        "measured_from": "publish: " + r["measured_from"] + "; delivery: " + r["delivery_measured_from"],
    }


MQTT_BENCHMARK_MEASURES = (
    "no latency; msg/s: messages handed to rumqttc (its publish() returned: queued, not yet sent or acked) "
    "over the time from starting its clients, connects included, to the last one's DISCONNECT queued; unpaced"
)
# Its summary line: "10 client, total: 1000, duration: 0.1234 (sec), avg speed: 8103.7 (msg/sec)".
MQTT_BENCHMARK_TOTAL = re.compile(
    r"^(\d+) client, total: (\d+), duration: ([0-9.]+) \(sec\), avg speed: ([0-9.]+) \(msg/sec\)$", re.M)
# One line per client: "client: 3, num: 100, duration: 0.0456 (sec), speed: 2193.0 (msg/sec)".
MQTT_BENCHMARK_CLIENT = re.compile(r"^client: (\d+), num: (\d+), duration: ([0-9.]+) \(sec\)", re.M)


def received_by_subscribers(run, tag, meta):
    """What the megaconn subscribers beside a tool without its own heard:
    all of it unstamped (counted in mqtt_unstamped and push.received, not
    per QoS), at the QoS of their subscription."""
    sub = load(os.path.join(run, tag + "-sub.json"))["summary"]
    return sub["push"]["received"]


def untimed(run, tag, meta, measures):
    """The fields of a tool that times nothing and counts no
    acknowledgement: what megaconn's subscribers received of it, what is
    missing, its CPU, and what its numbers mean."""
    received = received_by_subscribers(run, tag, meta)
    expected = meta["publishers"] * meta["messages"] * meta["subscribers"]
    return {
        "acknowledged": None,
        "publish_p50_ms": None,
        "publish_p99_ms": None,
        "received": received,
        "delivery_p50_ms": None,
        "delivery_p99_ms": None,
        "lost": expected - received,
        "duplicated": None,
        "tool_cpu_s": cpu_of(os.path.join(run, tag + ".time")),
        "measured_from": measures,
    }


def mqtt_benchmark_row(run, tag, meta):
    with open(os.path.join(run, tag + ".out")) as f:
        out = f.read()
    total = MQTT_BENCHMARK_TOTAL.search(out)
    clients = MQTT_BENCHMARK_CLIENT.findall(out)
    return {
        # Its own count: what its clients' publish() calls returned for.
        "published": int(total.group(2)) if total else 0,
        "msgs_per_s": float(total.group(4)) if total else None,
        "duration_s": float(total.group(3)) if total else None,
        "clients_reporting": len(clients),
        "publish_failures": out.count("publish failed"),
        **untimed(run, tag, meta, MQTT_BENCHMARK_MEASURES),
    }


PYMQTTBENCH_MEASURES = (
    "no percentiles; each publisher process sends its messages one by one, each on a connection of its own "
    "(connect, publish, PUBACK at QoS 1, disconnect: closed loop); msg/s: PUBS x MSGS over the mean publisher "
    "duration (its process start to its last disconnect); publish mean: that duration over MSGS; unpaced"
)
# Its --brief line: subscribers:publishers:sub mean s:sub std:sub client msg/s:sub total msg/s:
# pub mean s:pub std:pub client msg/s:pub total msg/s (the sub fields nan: none run).
PYMQTTBENCH_BRIEF = re.compile(r"^(\d+):(\d+):[^:\n]*:[^:\n]*:[^:\n]*:[^:\n]*:([0-9.]+):([0-9.]+):([0-9.]+):([0-9.]+)$", re.M)
PYMQTTBENCH_FAILED = re.compile(r"^(\d+) publishing workers failed$", re.M)


def pymqttbench_row(run, tag, meta):
    with open(os.path.join(run, tag + ".out")) as f:
        out = f.read()
    brief = PYMQTTBENCH_BRIEF.search(out)
    failed = sum(int(n) for n in PYMQTTBENCH_FAILED.findall(out))
    # It counts nothing: a publisher that returned sent all its MSGS (each
    # publish.single returns after its disconnect; a failure raises).
    published = (int(brief.group(2)) - failed) * meta["messages"] if brief else 0
    return {
        "published": published,
        "msgs_per_s": float(brief.group(6)) if brief else None,
        "publisher_mean_s": float(brief.group(3)) if brief else None,
        "publish_mean_ms": float(brief.group(3)) * 1000 / meta["messages"] if brief else None,
        "publish_failures": failed,
        **untimed(run, tag, meta, PYMQTTBENCH_MEASURES),
    }


ROWS = {"megaconn": megaconn_row, "paho": paho_row, "mqtt-benchmark": mqtt_benchmark_row, "pymqttbench": pymqttbench_row}


def cell(v, fmt):
    return "-" if v is None else fmt % v


def main():
    run, out, tags = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows = []
    for tag in tags:
        meta = load(os.path.join(run, tag + ".meta.json"))
        row = ROWS[meta["tool"]](run, tag, meta)
        row.update(meta)
        row["expected_published"] = meta["publishers"] * meta["messages"]
        row["expected_received"] = row["expected_published"] * meta["subscribers"]
        row["broker_cpu_s"] = meta["broker_cpu_ticks"] / meta["clk_tck"]
        rows.append(row)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    head = "%-9s %-14s %3s %9s %9s %9s %10s %10s %9s %10s %10s %8s %8s" % (
        "broker", "tool", "qos", "published", "acked", "msg/s", "pub p50", "pub p99",
        "received", "dlv p50", "dlv p99", "tool cpu", "brk cpu")
    print(head)
    for r in rows:
        print("%-9s %-14s %3d %9d %9s %9s %10s %10s %9d %10s %10s %7.2fs %7.2fs" % (
            r["broker"], r["tool"], r["qos"], r["published"], cell(r["acknowledged"], "%d"),
            cell(r["msgs_per_s"], "%.0f"), cell(r["publish_p50_ms"], "%.2f ms"), cell(r["publish_p99_ms"], "%.2f ms"),
            r["received"], cell(r["delivery_p50_ms"], "%.2f ms"), cell(r["delivery_p99_ms"], "%.2f ms"),
            r["tool_cpu_s"], r["broker_cpu_s"]))
    print("megaconn:       " + MEGACONN_MEASURES)
    print("paho:           publish from the actual send to its token, closed loop (the next send waits for it); "
          "delivery from the actual send")
    if any(r["tool"] == "mqtt-benchmark" for r in rows):
        print("mqtt-benchmark: " + MQTT_BENCHMARK_MEASURES + "; received: counted by a megaconn subscriber")
    if any(r["tool"] == "pymqttbench" for r in rows):
        print("pymqttbench:    " + PYMQTTBENCH_MEASURES + "; received: counted by a megaconn subscriber")
        for r in rows:
            if r["tool"] == "pymqttbench" and r["publish_mean_ms"] is not None:
                print("  pymqttbench against %s at QoS %d: publish mean %.2f ms (closed-loop mean, a connection each)"
                      % (r["broker"], r["qos"], r["publish_mean_ms"]))
    if not rows or any(r["published"] == 0 for r in rows):
        print("a run published nothing: see the logs in " + run, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
