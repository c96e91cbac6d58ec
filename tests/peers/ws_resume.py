"""A Python `websockets` subscriber that loses its connection and resumes.

usage: ws_resume.py PORT ADMIN_ADDR   (the server runs with --history 5)
Publishes through the admin API itself, so it knows what was missed:
  1. subscribe by command, learn the position, get m1..m3 live, disconnect;
  2. m4..m7 published while away; reconnect with ?since=news:EPOCH:3:
     exactly m4..m7 (offsets 4..7), then "subscribed" recovered true, then
     m8 live with offset 8 (no gap, no duplicate at the seam);
  3. the same for broadcasts (*), resumed by command with "since";
  4. an offset older than the history (5 kept): recovered false, nothing
     replayed; another epoch: recovered false;
  5. a malformed command gets an error naming the expected form.
Prints 'OK' when every check held.
"""
import asyncio
import json
import sys
import urllib.request

from websockets.asyncio.client import connect

port, admin = int(sys.argv[1]), sys.argv[2]
URL = f"ws://127.0.0.1:{port}/live"


def publish(path, data):
    req = urllib.request.Request(f"http://{admin}{path}", data=data.encode(), method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, r.status


async def recv(ws):
    return json.loads(await asyncio.wait_for(ws.recv(), 10))


async def until_subscribed(ws):
    """Messages up to and including the next 'subscribed' answer."""
    got = []
    while True:
        m = await recv(ws)
        got.append(m)
        if m.get("type") == "subscribed":
            return got


async def main():
    # 1. A first subscription: the answer carries the position only.
    async with connect(URL, compression=None) as ws:
        await ws.send(json.dumps({"type": "subscribe", "topic": "news"}))
        first = await until_subscribed(ws)
        assert first == [{"type": "subscribed", "topic": "news", "epoch": 0, "offset": 0, "recovered": True}], first
        for i in (1, 2, 3):
            publish("/publish?topic=news", f"m{i}")
        live = [await recv(ws) for _ in range(3)]
        assert [m["data"] for m in live] == ["m1", "m2", "m3"], live
        assert [m["offset"] for m in live] == [1, 2, 3], live
        epoch = live[-1]["epoch"]
        assert epoch != 0 and all(m["epoch"] == epoch for m in live), live
    # 2. Missed while away, recovered on reconnect by URL.
    for i in (4, 5, 6, 7):
        publish("/publish?topic=news", f"m{i}")
    async with connect(f"{URL}?subscribe=news&since=news:{epoch}:3", compression=None) as ws:
        got = await until_subscribed(ws)
        assert [m.get("data") for m in got[:-1]] == ["m4", "m5", "m6", "m7"], got
        assert [m["offset"] for m in got[:-1]] == [4, 5, 6, 7], got
        assert got[-1] == {"type": "subscribed", "topic": "news", "epoch": epoch, "offset": 7, "recovered": True}, got
        publish("/publish?topic=news", "m8")
        m8 = await recv(ws)
        assert (m8["data"], m8["offset"]) == ("m8", 8), m8
    # 3. Broadcasts resume too, by command.
    async with connect(URL, compression=None) as ws:
        await ws.send(json.dumps({"type": "subscribe", "topic": "*"}))
        start = (await until_subscribed(ws))[-1]
        publish("/broadcast", "b1")
        b1 = await recv(ws)
        assert (b1["stream"], b1["data"]) == ("broadcast", "b1"), b1
        at = {"epoch": b1["epoch"], "offset": b1["offset"]}
    publish("/broadcast", "b2")
    async with connect(URL, compression=None) as ws:
        await ws.send(json.dumps({"type": "subscribe", "topic": "*", "since": at}))
        got = await until_subscribed(ws)
        assert [m.get("data") for m in got[:-1]] == ["b2"], got
        assert got[-1]["recovered"] is True and got[-1]["offset"] == at["offset"] + 1, (start, got)
    # 4. Too old for the history (it keeps 5: 4..8), or another epoch.
    async with connect(URL, compression=None) as ws:
        await ws.send(json.dumps({"type": "subscribe", "topic": "news", "since": {"epoch": epoch, "offset": 1}}))
        got = await until_subscribed(ws)
        assert got == [{"type": "subscribed", "topic": "news", "epoch": epoch, "offset": 8, "recovered": False}], got
        await ws.send(json.dumps({"type": "subscribe", "topic": "news", "since": {"epoch": epoch ^ 1, "offset": 7}}))
        got = await until_subscribed(ws)
        assert got[-1]["recovered"] is False and len(got) == 1, got
        # 5. A malformed command is answered, not dropped.
        await ws.send(json.dumps({"type": "subscribe"}))
        err = await recv(ws)
        assert err["type"] == "error" and err["reason"] == "bad_command" and "expected" in err["message"], err
        await ws.send(json.dumps({"type": "subscribe", "topic": "bad topic"}))
        err = await recv(ws)
        assert (err["type"], err["reason"]) == ("error", "bad_topic"), err
        await ws.send(json.dumps({"type": "unsubscribe", "topic": "news"}))
        assert await recv(ws) == {"type": "unsubscribed", "topic": "news"}
    print("OK", flush=True)


asyncio.run(main())
