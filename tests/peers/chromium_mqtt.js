// A headless Chromium page (Debian's chromium, driven by playwright-core)
// running mqtt.js's browser bundle (node_modules/mqtt/dist/mqtt.min.js,
// the version pinned in package.json) against a `megaconn server
// --protocol ws`: it connects to ws://127.0.0.1:PORT/mqtt (MQTT 3.1.1,
// subprotocol mqtt), subscribes to b/# at QoS 1 and publishes
// "from the browser" to b/page at QoS 1.
// usage: node chromium_mqtt.js PORT
// Prints "ready" once subscribed and its publish acknowledged, then
// (after the test publishes b/admin through the admin API) a JSON line
// {"messages":["b/admin ...","b/page from the browser"],"errors":[...]}.
const { loopbackPage } = require('./chromium_page');
const port = Number(process.argv[2]);

(async () => {
  const { browser, page } = await loopbackPage('megaconn MQTT over WebSocket test page');
  try {
    // The package's exports do not name its browser bundle: by its path.
    await page.addScriptTag({ path: require('path').join(__dirname, 'node_modules', 'mqtt', 'dist', 'mqtt.min.js') });
    await page.evaluate((port) => new Promise((ok, fail) => {
      window.result = { messages: [], errors: [] };
      const c = mqtt.connect(`ws://127.0.0.1:${port}/mqtt`, { protocolVersion: 4, clientId: 'page', reconnectPeriod: 0 });
      c.on('error', (e) => { window.result.errors.push(String(e)); fail(String(e)); });
      c.on('message', (topic, payload) => window.result.messages.push(`${topic} ${payload.toString()}`));
      c.on('connect', () => c.subscribe('b/#', { qos: 1 }, (err) => {
        if (err) return fail(String(err));
        c.publish('b/page', 'from the browser', { qos: 1 }, (err) => (err ? fail(String(err)) : ok()));
      }));
    }), port);
    console.log('ready');
    await page.waitForFunction(() => window.result.messages.length >= 2, null, { timeout: 30000 }).catch(() => {});
    const result = await page.evaluate(() => window.result);
    result.messages.sort();
    console.log(JSON.stringify(result));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
