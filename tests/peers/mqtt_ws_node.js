// mqtt.js (5.x, pinned in package.json) over WebSocket against a
// `megaconn server --protocol ws`: MQTT 3.1.1 and 5.0 clients at
// ws://127.0.0.1:PORT/mqtt (mqtt.js offers the `mqtt` subprotocol);
// a subscriber of n/# (QoS 1) gets a publisher's QoS 0, 1 and 2 messages
// to n/a once each, at min(publish QoS, 1); every publish completes.
// usage: node mqtt_ws_node.js PORT   Prints OK when every check held.
const mqtt = require('mqtt');
const port = process.argv[2];
const fail = (what) => { console.log(`FAIL ${what}`); process.exit(1); };
setTimeout(() => fail('timed out'), 30000).unref();

async function run(version) {
  const tag = version === 5 ? 'v5' : 'v3';
  const url = `ws://127.0.0.1:${port}/mqtt`;
  const sub = await mqtt.connectAsync(url, { protocolVersion: version, clientId: `nsub-${tag}`, reconnectPeriod: 0 });
  const granted = await sub.subscribeAsync('n/#', { qos: 1 });
  if (granted.length !== 1 || granted[0].qos !== 1) fail(`${tag} granted ${JSON.stringify(granted)}`);
  const got = [];
  sub.on('message', (topic, payload, packet) => got.push(`${topic} ${payload} ${packet.qos}`));
  const pub = await mqtt.connectAsync(url, { protocolVersion: version, clientId: `npub-${tag}`, reconnectPeriod: 0 });
  for (const qos of [0, 1, 2]) await pub.publishAsync('n/a', `${tag} qos ${qos}`, { qos });
  const want = [0, 1, 2].map((q) => `n/a ${tag} qos ${q} ${Math.min(q, 1)}`);
  const deadline = Date.now() + 20000;
  while (got.length < want.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  if (JSON.stringify(got.sort()) !== JSON.stringify(want.sort())) fail(`${tag} got ${JSON.stringify(got)}`);
  await pub.endAsync();
  await sub.endAsync();
}

(async () => {
  await run(4);
  await run(5);
  console.log('OK');
})().catch((e) => fail(e && e.message));
