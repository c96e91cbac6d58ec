// A headless Chromium page (Debian's chromium, driven by playwright-core)
// follows a megaconn event stream with the browser's own EventSource,
// which reconnects by itself and sends Last-Event-ID.
// usage: node chromium_sse.js PORT
// Prints "ready" once the stream is open and subscribed, "got N" as
// messages arrive, "resumed" when a reconnect's subscribed event came, and
// at the end (7 messages) a JSON line {"offsets":[...],"data":[...],
// "resumes":[...subscribed events after a reconnect...],"errors":E}.
const { loopbackPage } = require('./chromium_page');
const port = Number(process.argv[2]);

(async () => {
  const { browser, page } = await loopbackPage('megaconn event stream test page');
  try {
    await page.exposeFunction('say', (line) => console.log(line));
    await page.evaluate((port) => {
      window.result = { offsets: [], data: [], resumes: [], errors: 0, opened: 0 };
      const es = new EventSource(`http://127.0.0.1:${port}/events?subscribe=feed`);
      es.onopen = () => { window.result.opened++; };
      es.onerror = () => { window.result.errors++; };
      es.addEventListener('subscribed', (ev) => {
        const s = JSON.parse(ev.data);
        if (s.topic !== 'feed') return;
        if (window.result.opened === 1) window.say('ready');
        else { window.result.resumes.push(s); window.say('resumed'); }
      });
      es.onmessage = (ev) => {
        const m = JSON.parse(ev.data);
        window.result.offsets.push(m.offset);
        window.result.data.push(m.data);
        window.say(`got ${window.result.data.length}`);
      };
    }, port);
    await page.waitForFunction(() => window.result.data.length >= 7, null, { timeout: 60000 });
    console.log(JSON.stringify(await page.evaluate(() => window.result)));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
