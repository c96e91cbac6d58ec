// Two headless Chromium pages (separate browser contexts: two users) use
// the chat example (examples/chat) through its backend at BASE: both log
// in and join the room, see each other online, and what one says the
// other reads.
// usage: node chromium_chat.js BASE    (e.g. http://127.0.0.1:8802)
// Prints a JSON line {"alice":{log,online},"bob":{log,online}}.
const { chromium } = require('playwright-core');
const base = process.argv[2];

async function user(browser, name) {
  const page = await (await browser.newContext()).newPage();
  page.on('pageerror', (e) => console.error(`${name}: page error: ${e}`));
  await page.goto(base + '/');
  await page.fill('#name', name);
  await page.fill('#room', 'lobby');
  await page.click('#login button');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'connected', null, { timeout: 20000 });
  return page;
}

const text = (page, id) => page.evaluate((id) => document.getElementById(id).textContent, id);
const waitText = (page, id, want) =>
  page.waitForFunction(([id, want]) => document.getElementById(id).textContent.includes(want), [id, want], { timeout: 20000 });

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const alice = await user(browser, 'alice');
    const bob = await user(browser, 'bob');
    await waitText(alice, 'online', 'bob');
    await waitText(bob, 'online', 'alice');
    await alice.fill('#text', 'hello bob');
    await alice.click('#say button');
    await waitText(bob, 'log', 'alice: hello bob');
    await bob.fill('#text', 'hi alice');
    await bob.click('#say button');
    await waitText(alice, 'log', 'bob: hi alice');
    const out = {};
    for (const [name, page] of [['alice', alice], ['bob', bob]]) {
      out[name] = { log: await text(page, 'log'), online: await text(page, 'online') };
    }
    console.log(JSON.stringify(out));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
