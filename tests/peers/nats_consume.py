#!/usr/bin/env python3
"""Read what `megaconn server --upstream nats://...` stored in JetStream,
with NATS's own client (nats-py), as an application would.

usage: nats_consume.py NATS_URL SUBJECT_FILTER COUNT [TIMEOUT_S]

Pulls COUNT messages of SUBJECT_FILTER from the stream that holds it
(an ephemeral pull consumer from the first message), acknowledges each,
and prints one JSON line per message: subject, payload (latin-1 text),
its Megaconn-* headers, the stream sequence; then one line with the
stream's name and how many messages it holds. Exits 1 with a reason on
stderr if fewer than COUNT arrive within TIMEOUT_S (default 20)."""
import asyncio
import json
import sys
import time

import nats


async def main():
    url, subject, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 20.0
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        stream = await js.find_stream_name_by_subject(subject)
        sub = await js.pull_subscribe(subject, durable=None, stream=stream)
        got = 0
        deadline = time.monotonic() + timeout
        while got < count:
            left = deadline - time.monotonic()
            if left <= 0:
                print(f"got {got} of {count} messages of {subject} in {timeout} s", file=sys.stderr)
                sys.exit(1)
            try:
                msgs = await sub.fetch(min(count - got, 256), timeout=min(left, 2.0))
            except nats.errors.TimeoutError:
                continue
            for m in msgs:
                headers = {k: v for k, v in (m.headers or {}).items() if k.startswith("Megaconn-")}
                print(json.dumps({"subject": m.subject, "data": m.data.decode("latin-1"), "headers": headers, "seq": m.metadata.sequence.stream}), flush=True)
                await m.ack()
                got += 1
        info = await js.stream_info(stream)
        print(json.dumps({"stream": stream, "messages": info.state.messages}), flush=True)
    finally:
        await nc.close()


asyncio.run(main())
