// Opens gpuvet's HTML report in headless Chromium from a file:// address and checks
// what a reader sees: the expected finding text and an SVG chart, rendered. Saves a
// full-page screenshot. Run by crates/gpuvet/tests/cli/html_report.rs:
//
//   node tests/browser/html_report.mjs REPORT.html SCREENSHOT.png "EXPECTED TEXT"...
//
// Exits 0 when every expected text is visible on the page, else 1 with the reason.
// Chromium comes from the system (`apt-get install chromium`), not from Playwright's
// downloads: CI machines reach the package registries and nothing else.
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { executablePath, withBrowser } from './launch.mjs';

const [report, screenshot, ...expected] = process.argv.slice(2);
if (!report || !screenshot || expected.length === 0) {
  console.error('usage: node html_report.mjs REPORT.html SCREENSHOT.png "EXPECTED TEXT"...');
  process.exit(2);
}
const url = pathToFileURL(resolve(report)).href;

let failure = null;
try {
  failure = await withBrowser({ width: 1100, height: 900 }, async (browser) => {
    const page = await browser.newPage();
    // The report is self-contained: any request beyond the file itself is a defect.
    const fetched = [];
    page.on('request', (request) => {
      if (request.url() !== url) fetched.push(request.url());
    });
    await page.goto(url, { waitUntil: 'load' });
    const text = await page.locator('body').innerText();
    const missing = expected.filter((needle) => !text.includes(needle));
    const charts = await page.locator('svg.chart').count();
    const box = charts > 0 ? await page.locator('svg.chart').first().boundingBox() : null;
    await page.screenshot({ path: screenshot, fullPage: true });
    if (missing.length > 0) return `not on the page: ${JSON.stringify(missing)}`;
    if (charts === 0 || !box || box.width < 100 || box.height < 50) {
      return `no rendered SVG chart (count ${charts}, first box ${JSON.stringify(box)})`;
    }
    if (fetched.length > 0) return `the page fetched ${JSON.stringify(fetched)}`;
    console.log(`ok: ${url}: ${expected.length} text(s) found, ${charts} chart(s), screenshot ${screenshot}`);
    return null;
  });
} catch (error) {
  failure = `chromium at ${executablePath} could not show ${url}: ${error.message}`;
}
if (failure) {
  console.error(failure);
  process.exit(1);
}
