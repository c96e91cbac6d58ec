// Server-to-client topic aliases with mqtt.js (5.x, pinned in
// package.json), which resolves the aliases it receives itself.
// usage: node mqtt_alias_node.js URL   (mqtt://127.0.0.1:PORT or
//   ws://127.0.0.1:PORT/mqtt)   Prints OK when every check held.
// A v5 subscriber of al/# that accepts 2 aliases (Topic Alias Maximum 2)
// and one that accepts none; a publisher sends al/one, al/two, al/one,
// al/three, al/two, al/three (QoS 0 and 1 mixed). The first gets every
// message under its real topic, and the PUBLISH packets as they came
// (mqtt.js's packetreceive, before it resolves an alias) show the
// aliases the server chose: set with the topic, then the alias alone,
// the least recently used one taken over past the maximum. The other
// gets whole topics, no alias.
const mqtt = require('mqtt');
const url = process.argv[2];
const fail = (what) => { console.log(`FAIL ${what}`); process.exit(1); };
setTimeout(() => fail('timed out'), 30000).unref();

async function subscriber(id, properties) {
  const c = await mqtt.connectAsync(url, { protocolVersion: 5, clientId: id, reconnectPeriod: 0, properties });
  const granted = await c.subscribeAsync('al/#', { qos: 1 });
  if (granted.length !== 1 || granted[0].qos !== 1) fail(`${id} granted ${JSON.stringify(granted)}`);
  c.got = [];
  c.wire = [];
  c.on('message', (topic, payload) => c.got.push(`${topic} ${payload}`));
  c.on('packetreceive', (p) => {
    if (p.cmd === 'publish') c.wire.push(`${p.topic}|${p.properties && p.properties.topicAlias}|${p.qos}`);
  });
  return c;
}

(async () => {
  const aliased = await subscriber('alias-two', { topicAliasMaximum: 2 });
  const whole = await subscriber('alias-none', {});
  const pub = await mqtt.connectAsync(url, { protocolVersion: 5, clientId: 'alias-pub', reconnectPeriod: 0 });
  const sent = [['al/one', 0], ['al/two', 1], ['al/one', 1], ['al/three', 0], ['al/two', 1], ['al/three', 1]];
  // One at a time (a QoS 1 publish resolves on its PUBACK), so they reach
  // the server in this order.
  for (const [i, [topic, qos]] of sent.entries()) await pub.publishAsync(topic, `m${i}`, { qos });
  const want = sent.map(([topic], i) => `${topic} m${i}`);
  const deadline = Date.now() + 20000;
  while ((aliased.got.length < want.length || whole.got.length < want.length) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
  }
  for (const c of [aliased, whole]) {
    if (JSON.stringify(c.got) !== JSON.stringify(want)) fail(`${c.options.clientId} got ${JSON.stringify(c.got)}`);
  }
  const wire = [
    'al/one|1|0', // set 1
    'al/two|2|1', // set 2
    '|1|1', // al/one by its alias
    'al/three|2|0', // full: al/two was used least recently
    'al/two|1|1', // and now al/one
    '|2|1', // al/three by its alias
  ];
  if (JSON.stringify(aliased.wire) !== JSON.stringify(wire)) fail(`aliased wire ${JSON.stringify(aliased.wire)}`);
  const plain = sent.map(([topic, qos]) => `${topic}|undefined|${qos}`);
  if (JSON.stringify(whole.wire) !== JSON.stringify(plain)) fail(`whole wire ${JSON.stringify(whole.wire)}`);
  for (const c of [pub, aliased, whole]) await c.endAsync();
  console.log('OK');
})().catch((e) => fail(e && e.message));
