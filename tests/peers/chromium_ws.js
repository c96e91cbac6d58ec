// A headless Chromium page (Debian's chromium, driven by playwright-core;
// no browser is downloaded) opens N WebSocket connections to a megaconn
// server and waits for one broadcast on each.
// usage: node chromium_ws.js PORT N [SPKI]
// With SPKI (base64 SHA-256 of the server certificate's public key) the
// page opens wss://localhost:PORT and Chromium trusts that key; else
// ws://127.0.0.1:PORT.
// Prints "ready" once all N are open, then (after the test publishes) a
// JSON line {"open":N,"received":R,"texts":[...distinct messages...],
// "extensions":[...distinct negotiated Sec-WebSocket-Extensions...]}.
const { loopbackPage } = require('./chromium_page');
const [port, n, spki] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4]];
const base = spki ? `wss://localhost:${port}` : `ws://127.0.0.1:${port}`;

(async () => {
  const extra = spki ? [`--ignore-certificate-errors-spki-list=${spki}`] : [];
  const { browser, page } = await loopbackPage('megaconn WebSocket test page', extra);
  try {
    await page.evaluate(([base, n]) => {
      window.result = { open: 0, received: 0, texts: [], errors: 0, extensions: [] };
      window.sockets = [];
      for (let i = 0; i < n; i++) {
        const ws = new WebSocket(`${base}/browser?subscribe=page`);
        ws.onopen = () => {
          window.result.open++;
          if (!window.result.extensions.includes(ws.extensions)) window.result.extensions.push(ws.extensions);
        };
        ws.onerror = () => window.result.errors++;
        ws.onmessage = (ev) => {
          window.result.received++;
          const t = JSON.parse(ev.data).data;
          if (!window.result.texts.includes(t)) window.result.texts.push(t);
        };
        window.sockets.push(ws);
      }
    }, [base, n]);
    await page.waitForFunction((n) => window.result.open + window.result.errors >= n, n, { timeout: 30000 });
    console.log('ready');
    await page.waitForFunction((n) => window.result.received >= n, n, { timeout: 30000 }).catch(() => {});
    console.log(JSON.stringify(await page.evaluate(() => window.result)));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
