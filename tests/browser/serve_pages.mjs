// Drives headless Chromium through `gpuvet serve`'s pages as a person would: the
// instance list, the failed instance (the verdict naming the slow node first, at most
// MAX_ROWS rows in its folded findings table, and a chart), the events tab filtered to
// SanityCheckFailed with the page's own form, and the attempt's timeline (the first
// error marked on the slow node's lane, its label clear of that lane and its bars)
// with its bundle download; the Nodes tab and the first ranked node's page across
// jobs (its runs and a drawn sparkline per check; with `--local-nodes` only the
// coordinator's node keeps a report, so that is the node listed); then each further instance page given, held to the same verdict and row
// bound. Saves a screenshot of each page. With GPUVET_SIGN_IN_PATH
// set (a one-time link of a server that guards its reads), it first finds the pages
// refused, then signs in by following that link from a page of another site, and
// finds the link refused a second time. Run by crates/gpuvet/tests/cli/serve_push.rs:
//
//   GPUVET_SIGN_IN_PATH=/session/TICKET \
//   node tests/browser/serve_pages.mjs BASE_URL SCREENSHOT_DIR SLOW_NODE MAX_ROWS [INSTANCE_PATH]...
//
// Exits 0 when every step finds what it expects, else 1 with the reason.
import { join } from 'node:path';
import { executablePath, withBrowser } from './launch.mjs';

const [base, shots, slowNode, maxRowsArg, ...instancePaths] = process.argv.slice(2);
const maxRows = Number(maxRowsArg);
const signIn = process.env.GPUVET_SIGN_IN_PATH;
if (!base || !shots || !slowNode || !Number.isInteger(maxRows)) {
  console.error('usage: node serve_pages.mjs BASE_URL SCREENSHOT_DIR SLOW_NODE MAX_ROWS [INSTANCE_PATH]...');
  process.exit(2);
}

function expect(condition, message) {
  if (!condition) throw new Error(message);
}

// Whether two boxes share any area.
function overlap(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

// The instance page on screen: the verdict names the slow node and comes before the
// findings, whose folded table has at most MAX_ROWS rows. Returns the row count.
async function checkInstancePage(page, where) {
  const verdict = page.locator('#verdict');
  expect((await verdict.count()) === 1, `${where}: no verdict block`);
  expect(await verdict.isVisible(), `${where}: the verdict block is not visible`);
  const said = await verdict.innerText();
  expect(said.includes(slowNode), `${where}: the verdict does not name ${slowNode}: ${said}`);
  const verdictBox = await verdict.boundingBox();
  const findingsBox = await page.locator('#findings').boundingBox();
  expect(verdictBox.y < findingsBox.y, `${where}: the verdict is not above the findings`);
  const rows = await page.locator('#findings table.folded > tbody > tr').count();
  expect(rows >= 1, `${where}: no finding row`);
  expect(rows <= maxRows, `${where}: ${rows} finding rows, more than ${maxRows}`);
  const folded = page.locator('#findings details.every-entity');
  if ((await folded.count()) > 0) {
    expect(!(await folded.evaluate((d) => d.open)), `${where}: every entity is not collapsed`);
  }
  return rows;
}

let failure = null;
try {
  await withBrowser({ width: 1200, height: 900 }, async (browser) => {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));

    // 0. A server that guards its reads: refused until signed in; the one-time link,
    // clicked on a page of another site, signs in (a cookie no script reads and no
    // other site sends) and lands on the instance list; a second use is refused.
    if (signIn) {
      const refused = await page.goto(base + '/', { waitUntil: 'load' });
      expect(refused.status() === 401, `/ before signing in answered ${refused.status()}`);
      const said = await page.locator('body').innerText();
      expect(said.includes('Sign-in needed'), `no sign-in page: ${said}`);
      // A page of another site, as a chat or a mail would link it.
      await page.route('http://elsewhere.test/', (route) =>
        route.fulfill({ contentType: 'text/html', body: `<a id="sign-in" href="${base + signIn}">sign in</a>` }));
      await page.goto('http://elsewhere.test/', { waitUntil: 'load' });
      await Promise.all([page.waitForURL(base + '/'), page.locator('#sign-in').click()]);
      await page.waitForLoadState('load');
      const listed = await page.locator('tr[data-status]').count();
      expect(listed >= 1, `signed in, yet the instance list shows no instance: ${await page.locator('body').innerText()}`);
      const cookies = await page.context().cookies();
      const session = cookies.find((cookie) => cookie.name === 'gpuvet_session');
      expect(session && session.httpOnly && session.sameSite === 'Strict',
        `no HttpOnly, SameSite=Strict session cookie: ${JSON.stringify(cookies.map((c) => [c.name, c.httpOnly, c.sameSite]))}`);
      // Over HTTPS, a cookie the browser never sends in clear.
      expect(!base.startsWith('https://') || session.secure,
        `the session cookie of an HTTPS server is not Secure: ${JSON.stringify(session)}`);
      const again = await page.request.get(base + signIn);
      expect(again.status() === 401, `the link's second use answered ${again.status()}`);
    }

    // 1. The instance list: the failed instance is there, marked failed.
    await page.goto(base + '/', { waitUntil: 'load' });
    const failed = page.locator('tr[data-status="failed"]');
    expect((await failed.count()) >= 1, 'no failed instance on the instance list');
    await page.screenshot({ path: join(shots, 'instances.png'), fullPage: true });

    // 2. Open it: the verdict, the slow node's findings folded, and a drawn chart.
    await failed.first().locator('a').first().click();
    await page.waitForLoadState('load');
    const findingRows = await checkInstancePage(page, 'the failed instance');
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
    const firstLane = await page.locator('g.swim[data-lane]').first().getAttribute('data-lane');
    expect(firstLane === slowNode, `the first lane is ${firstLane}, not ${slowNode}`);
    // The label says which lane it marks, and covers neither that lane nor its bars.
    const marked = await mark.first().getAttribute('data-marks');
    expect(marked === slowNode, `the first error marks the lane ${marked}, not ${slowNode}`);
    const labelBox = await page.locator('#first-error .first-error-label').boundingBox();
    expect(labelBox && labelBox.width > 0 && labelBox.height > 0, 'the first-error label is not drawn');
    const lane = page.locator(`g.swim[data-lane="${slowNode}"]`);
    const laneBox = await lane.locator('rect.lane-bg').boundingBox();
    expect(!overlap(labelBox, laneBox), `the first-error label ${JSON.stringify(labelBox)} overlaps its lane ${JSON.stringify(laneBox)}`);
    const bars = await lane.locator('rect.check-span').all();
    expect(bars.length >= 1, `no check bar on the lane of ${slowNode}`);
    for (const bar of bars) {
      const barBox = await bar.boundingBox();
      expect(!overlap(labelBox, barBox), `the first-error label overlaps a bar of its lane ${JSON.stringify(barBox)}`);
    }
    const timelineVerdict = await page.locator('#verdict').innerText();
    expect(timelineVerdict.includes(slowNode), `the timeline's verdict does not name ${slowNode}`);
    await page.screenshot({ path: join(shots, 'timeline.png'), fullPage: true });
    const href = await page.locator('a.bundle').first().getAttribute('href');
    const bundle = await page.request.get(new URL(href, base).toString());
    const bytes = await bundle.body();
    expect(bundle.status() === 200, `the bundle download answered ${bundle.status()}`);
    expect(bundle.headers()['content-type'] === 'application/gzip', 'the bundle is not gzip');
    expect(bytes[0] === 0x1f && bytes[1] === 0x8b, 'the bundle does not start as gzip');

    // 5. The Nodes tab, reached from the nav: the nodes ranked; the first one's page
    // across jobs, with its runs (one per job pushed) and a drawn sparkline per check.
    await page.getByRole('link', { name: 'Nodes' }).first().click();
    await page.waitForLoadState('load');
    const ranked = await page.locator('table.nodes-ranked tbody tr').evaluateAll(
      (all) => all.map((row) => row.dataset.node));
    expect(ranked.length >= 1, 'the nodes page ranks no node');
    await page.screenshot({ path: join(shots, 'nodes.png'), fullPage: true });
    await page.locator('table.nodes-ranked tbody tr a').first().click();
    await page.waitForLoadState('load');
    const heading = await page.locator('h1').innerText();
    expect(heading.includes(ranked[0]), `the node page's heading is ${heading}, not ${ranked[0]}`);
    const nodeRuns = await page.locator('table.node-runs tbody tr').count();
    expect(nodeRuns >= 1, 'the node page lists no run');
    const sparks = page.locator('table.checks-over-time svg.spark');
    expect((await sparks.count()) >= 1, 'the node page draws no sparkline');
    const sparkBox = await sparks.first().boundingBox();
    expect(sparkBox && sparkBox.width > 100 && sparkBox.height > 20, `no drawn sparkline (${JSON.stringify(sparkBox)})`);
    await page.screenshot({ path: join(shots, 'node.png'), fullPage: true });

    // 6. Each further instance page: the same verdict and row bound.
    const counts = [findingRows];
    for (const [i, path] of instancePaths.entries()) {
      await page.goto(base + path, { waitUntil: 'load' });
      counts.push(await checkInstancePage(page, path));
      await page.screenshot({ path: join(shots, `instance-${i + 2}.png`), fullPage: true });
    }

    expect(errors.length === 0, `script errors on the pages: ${errors}`);
    console.log(`ok: ${base}: ${signIn ? 'signed in by a one-time link, ' : ''}failed instance with ${slowNode} in its verdict and ${counts.join(', ')} finding row(s), a chart, ${kinds.length} SanityCheckFailed event(s), its timeline with the first-error label clear of its lane, a ${bytes.length}-byte bundle, ${ranked.length} ranked node(s) and ${ranked[0]}'s page with ${nodeRuns} run(s) and ${await sparks.count()} sparkline(s); screenshots in ${shots}`);
  });
} catch (error) {
  failure = `${error.message} (chromium at ${executablePath})`;
}
if (failure) {
  console.error(failure);
  process.exit(1);
}
