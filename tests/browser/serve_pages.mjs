// Drives headless Chromium through `gpuvet serve`'s pages as a person would: the
// instance list, the failed instance (its slow node's finding and a chart), the
// events tab filtered to SanityCheckFailed with the page's own form, and the attempt's
// timeline (the first error marked on the slow node's lane) with its bundle download.
// Saves a screenshot of each page. Run by crates/gpuvet/tests/cli/serve_push.rs:
//
//   node tests/browser/serve_pages.mjs BASE_URL SCREENSHOT_DIR SLOW_NODE
//
// Exits 0 when every step finds what it expects, else 1 with the reason.
import { join } from 'node:path';
import { executablePath, withBrowser } from './launch.mjs';

const [base, shots, slowNode] = process.argv.slice(2);
if (!base || !shots || !slowNode) {
  console.error('usage: node serve_pages.mjs BASE_URL SCREENSHOT_DIR SLOW_NODE');
  process.exit(2);
}

function expect(condition, message) {
  if (!condition) throw new Error(message);
}

let failure = null;
try {
  await withBrowser({ width: 1200, height: 900 }, async (browser) => {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));

    // 1. The instance list: the failed instance is there, marked failed.
    await page.goto(base + '/', { waitUntil: 'load' });
    const failed = page.locator('tr[data-status="failed"]');
    expect((await failed.count()) >= 1, 'no failed instance on the instance list');
    await page.screenshot({ path: join(shots, 'instances.png'), fullPage: true });

    // 2. Open it: the slow node's finding and a drawn chart.
    await failed.first().locator('a').first().click();
    await page.waitForLoadState('load');
    const text = await page.locator('body').innerText();
    expect(text.includes(slowNode), `the instance page does not name ${slowNode}`);
    expect(/slow/i.test(text), 'the instance page shows no slow finding');
    const chart = page.locator('svg.chart').first();
    const box = await chart.boundingBox();
    expect(box && box.width > 100 && box.height > 50, `no drawn chart (${JSON.stringify(box)})`);
    await page.screenshot({ path: join(shots, 'instance.png'), fullPage: true });

    // 3. The events tab, filtered with its own form.
    await page.getByRole('link', { name: 'Events' }).first().click();
    await page.waitForLoadState('load');
    await page.selectOption('select[name="kind"]', 'SanityCheckFailed');
    await Promise.all([
      page.waitForURL(/kind=SanityCheckFailed/),
      page.locator('form[action="/events"] [type="submit"]').first().click(),
    ]);
    const rows = page.locator('tr[data-kind]');
    const kinds = await rows.evaluateAll((all) => all.map((row) => row.dataset.kind));
    expect(kinds.length >= 1, 'no event after filtering to SanityCheckFailed');
    expect(kinds.every((kind) => kind === 'SanityCheckFailed'), `other kinds shown: ${kinds}`);
    await page.screenshot({ path: join(shots, 'events.png'), fullPage: true });

    // 4. The failed instance's timeline: the first error on the slow node's lane, and a
    // bundle to download.
    await page.goto(base + '/', { waitUntil: 'load' });
    await page.locator('tr[data-status="failed"]').first().locator('a').first().click();
    await page.waitForLoadState('load');
    await page.getByRole('link', { name: 'Timeline' }).first().click();
    await page.waitForLoadState('load');
    const mark = page.locator('#first-error');
    expect((await mark.count()) === 1, 'the timeline marks no first error');
    const markBox = await mark.first().boundingBox();
    expect(markBox && markBox.width > 0 && markBox.height > 0, 'the first-error mark is not drawn');
    const timelineText = await page.locator('body').innerText();
    expect(timelineText.includes(slowNode), `the timeline does not name ${slowNode}`);
    const firstLane = await page.locator('[data-lane]').first().getAttribute('data-lane');
    expect(firstLane === slowNode, `the first lane is ${firstLane}, not ${slowNode}`);
    await page.screenshot({ path: join(shots, 'timeline.png'), fullPage: true });
    const href = await page.locator('a.bundle').first().getAttribute('href');
    const bundle = await page.request.get(new URL(href, base).toString());
    const bytes = await bundle.body();
    expect(bundle.status() === 200, `the bundle download answered ${bundle.status()}`);
    expect(bundle.headers()['content-type'] === 'application/gzip', 'the bundle is not gzip');
    expect(bytes[0] === 0x1f && bytes[1] === 0x8b, 'the bundle does not start as gzip');

    expect(errors.length === 0, `script errors on the pages: ${errors}`);
    console.log(`ok: ${base}: failed instance, ${slowNode} and a chart, ${kinds.length} SanityCheckFailed event(s), its timeline and a ${bytes.length}-byte bundle; screenshots in ${shots}`);
  });
} catch (error) {
  failure = `${error.message} (chromium at ${executablePath})`;
}
if (failure) {
  console.error(failure);
  process.exit(1);
}
