// Debian's headless Chromium opens megaconn's dashboard on its admin port
// (`/ui`), first without the token (the page must ask for it), then with
// it (`/ui/#token=...`), waits for the page's third render, and prints one
// JSON line: what each card shows (its raw value), each table's rows,
// the table of rows (a load generator's phases, a server's busiest
// topics: each row's cells by column), the
// /stats the page last rendered, every URL the page asked for, the
// page's Content-Security-Policy, the chart's drawn pixels; a screenshot
// goes to SHOT.
// usage: node chromium_dashboard.js ADMIN_ADDR TOKEN|- SHOT (-: no token)
const { launch } = require('./chromium_page');
const [addr, token, shot] = process.argv.slice(2);
const origin = `http://${addr}`;

(async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage();
    const requests = [];
    page.on('request', (r) => requests.push(r.url()));
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    // Chromium logs each /stats answered 401 as an error: counted apart
    // (the page without its token), any other error kept.
    let unauthorized = 0;
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      if (/status of 401/.test(m.text())) unauthorized++;
      else errors.push(m.text());
    });

    let asked = null;
    let policy = '';
    if (token === '-') {
      // An admin API without a token (a loopback load generator's).
      const answer = await page.goto(`${origin}/ui`);
      policy = answer.headers()['content-security-policy'] || '';
    } else {
      // Without the token: the page loads, /stats says 401, the page asks.
      await page.goto(`${origin}/ui`);
      await page.waitForSelector('#login:not([hidden])', { timeout: 20000 });
      asked = await page.textContent('#status');
      // Another path (/ui/), so the browser loads the page again.
      const answer = await page.goto(`${origin}/ui/#token=${encodeURIComponent(token)}`);
      policy = answer.headers()['content-security-policy'] || '';
    }
    await page.waitForFunction(() => window.dashboard && window.dashboard.lastAt > 0, null, { timeout: 20000 });
    const first = await page.evaluate(() => window.dashboard.lastAt);
    await page.waitForFunction((t) => window.dashboard.lastAt > t + 1500, first, { timeout: 20000 });
    const seen = await page.evaluate(() => {
      const cards = {};
      for (const el of document.querySelectorAll('[data-key]')) cards[el.dataset.key] = el.dataset.value;
      const tables = {};
      for (const t of document.querySelectorAll('table')) {
        const rows = {};
        for (const r of t.rows) if (r.cells.length === 2) rows[r.cells[0].textContent] = Number(r.cells[1].dataset.value);
        tables[t.id] = rows;
      }
      // The table of rows (a load generator's phases, a server's busiest
      // topics): each row's cells by column (raw values).
      const grid = [];
      for (const r of document.querySelectorAll('#grid-table tbody tr')) {
        const cells = {};
        for (const c of r.cells) cells[c.dataset.column] = c.dataset.value === undefined ? c.textContent : Number(c.dataset.value);
        grid.push({ row: r.dataset.row, now: r.className === 'now', cells });
      }
      const c = document.getElementById('chart-a');
      const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let drawn = 0;
      for (let i = 3; i < px.length; i += 4) if (px[i] > 0) drawn++;
      return { cards, tables, grid, stats: window.dashboard.last, drawn, address: location.href, login_hidden: document.getElementById('login').hidden };
    });
    await page.screenshot({ path: shot, fullPage: true });
    console.log(JSON.stringify({ asked, policy, requests, errors, unauthorized, ...seen }));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
