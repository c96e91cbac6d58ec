// A headless Chromium page (Debian's chromium, driven by playwright-core)
// follows a megaconn event stream with the browser's own EventSource,
// which reconnects by itself and sends Last-Event-ID.
// usage: node chromium_sse.js PORT
// Prints "ready" once the stream is open and subscribed, "got N" as
// messages arrive, "resumed" when a reconnect's subscribed event came, and
// at the end (7 messages) a JSON line {"offsets":[...],"data":[...],
// "resumes":[...subscribed events after a reconnect...],"errors":E};
// "error (readyState N)" each time the stream breaks or a reconnect fails.
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
      es.onerror = () => { window.result.errors++; window.say(`error (readyState ${es.readyState})`); };
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
    // The test bounds each step (and kills this page at its deadline);
    // this one bounds the whole run, longer than the steps summed, and
    // on running out says what the page had, so a failure explains itself.
    const whole = await page.waitForFunction(() => window.result.data.length >= 7, null, { timeout: 150000 }).catch((e) => e);
    const result = await page.evaluate(() => window.result);
    if (whole instanceof Error) {
      console.log(`gave up after 150 s with ${JSON.stringify(result)}`);
      throw whole;
    }
    console.log(JSON.stringify(result));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
