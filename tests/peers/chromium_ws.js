// A headless Chromium page (Debian's chromium, driven by playwright-core;
// no browser is downloaded) opens N WebSocket connections to a megaconn
// server and waits for one broadcast on each.
// usage: node chromium_ws.js PORT N
// Prints "ready" once all N are open, then (after the test publishes) a
// JSON line {"open":N,"received":R,"texts":[...distinct messages...]}.
const { chromium } = require('playwright-core');
const http = require('http');
const [port, n] = [Number(process.argv[2]), Number(process.argv[3])];

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  try {
    // The page comes from loopback too: Chromium's local-network-access
    // rules stop a page from elsewhere (even about:blank) reaching 127.0.0.1.
    const site = http.createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html' });
      res.end('<!doctype html><title>megaconn</title><p>WebSocket test page</p>');
    });
    await new Promise((ok) => site.listen(0, '127.0.0.1', ok));
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${site.address().port}/`);
    site.close();
    await page.evaluate(([port, n]) => {
      window.result = { open: 0, received: 0, texts: [], errors: 0 };
      window.sockets = [];
      for (let i = 0; i < n; i++) {
        const ws = new WebSocket(`ws://127.0.0.1:${port}/browser?subscribe=page`);
        ws.onopen = () => window.result.open++;
        ws.onerror = () => window.result.errors++;
        ws.onmessage = (ev) => {
          window.result.received++;
          const t = JSON.parse(ev.data).data;
          if (!window.result.texts.includes(t)) window.result.texts.push(t);
        };
        window.sockets.push(ws);
      }
    }, [port, n]);
    await page.waitForFunction((n) => window.result.open + window.result.errors >= n, n, { timeout: 30000 });
    console.log('ready');
    await page.waitForFunction((n) => window.result.received >= n, n, { timeout: 30000 }).catch(() => {});
    console.log(JSON.stringify(await page.evaluate(() => window.result)));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
