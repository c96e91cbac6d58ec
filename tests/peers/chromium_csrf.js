// A headless Chromium page (Debian's chromium, driven by playwright-core)
// on another origin tries what any web page the operator opens could try
// against a loopback admin API without a token: "simple" no-cors POSTs
// (text/plain, a Blob with no type, a form) to /broadcast and /publish.
// usage: node chromium_csrf.js ADMIN_ADDR
// Prints one JSON line: each fetch's outcome, "opaque" when a response
// came back (the request reached the server), or the error.
const { loopbackPage } = require('./chromium_page');
const admin = process.argv[2];

(async () => {
  // Another origin (loopback, another port): the same address space, so
  // Chromium itself does not block it.
  const { browser, page } = await loopbackPage('not the admin');
  try {
    const outcomes = await page.evaluate(async (admin) => {
      const tries = [
        [`http://${admin}/broadcast`, 'pwned (text/plain)'],
        [`http://${admin}/publish?topic=page`, new Blob(['pwned (blob)'])],
        [`http://${admin}/broadcast`, new URLSearchParams({ x: 'pwned (form)' })],
      ];
      const out = [];
      for (const [url, body] of tries) {
        try {
          const r = await fetch(url, { method: 'POST', mode: 'no-cors', body });
          out.push(r.type);
        } catch (e) {
          out.push(`error: ${e}`);
        }
      }
      return out;
    }, admin);
    console.log(JSON.stringify({ outcomes }));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
