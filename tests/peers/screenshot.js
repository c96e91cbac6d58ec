// Screenshot a local HTML file in headless Chromium (Debian's chromium,
// driven by playwright-core), with the network off: a self-contained
// report page must render from the file alone.
// usage: node screenshot.js PAGE.html OUT.png
const { chromium } = require('playwright-core');
const [page_path, out] = [process.argv[2], process.argv[3]];

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const context = await browser.newContext({ viewport: { width: 1000, height: 1400 } });
    const requests = [];
    // Anything but the file itself is a dependency the page must not have.
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith('file://')) return route.continue();
      requests.push(url);
      return route.abort();
    });
    const page = await context.newPage();
    await page.goto('file://' + require('path').resolve(page_path));
    await page.screenshot({ path: out, fullPage: false });
    const svgs = await page.evaluate(() => document.querySelectorAll('svg').length);
    console.log(JSON.stringify({ svgs, external_requests: requests }));
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
