// Debian's headless Chromium (driven by playwright-core; no browser is
// downloaded) with one page opened from a throwaway HTTP server on
// loopback: a real origin, in the same address space as the servers under
// test (Chromium's local-network-access rules stop a page from elsewhere,
// even about:blank, reaching 127.0.0.1).
const { chromium } = require('playwright-core');
const http = require('http');

// extraArgs: more Chromium flags (e.g. --ignore-certificate-errors-spki-list
// to trust a test certificate by its key, as a pinned one).
async function launch(extraArgs = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', ...extraArgs],
  });
}

async function loopbackPage(title, extraArgs = []) {
  const browser = await launch(extraArgs);
  const site = http.createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end(`<!doctype html><title>${title}</title><p>${title}</p>`);
  });
  await new Promise((ok) => site.listen(0, '127.0.0.1', ok));
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${site.address().port}/`);
  site.close();
  return { browser, page };
}

module.exports = { launch, loopbackPage };
