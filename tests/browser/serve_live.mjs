// The instance page of `gpuvet serve` while a node's checks run: it shows the
// instance as running, and when the node's report arrives it reloads by itself and
// shows the finding. Run by crates/gpuvet/tests/cli/serve_push.rs:
//
//   node tests/browser/serve_live.mjs INSTANCE_URL REPORT_URL REPORT.json TOKEN EXPECTED SCREENSHOT_DIR
//
// Opens INSTANCE_URL, checks it says `running`, POSTs REPORT.json to REPORT_URL with
// the token (as the node would), then waits for EXPECTED on the page without touching
// it. Exits 0 when it appears, else 1 with the reason.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { executablePath, withBrowser } from './launch.mjs';

const [instanceUrl, reportUrl, reportFile, token, expected, shots] = process.argv.slice(2);
if (!shots) {
  console.error('usage: node serve_live.mjs INSTANCE_URL REPORT_URL REPORT.json TOKEN EXPECTED SCREENSHOT_DIR');
  process.exit(2);
}

function expect(condition, message) {
  if (!condition) throw new Error(message);
}

let failure = null;
try {
  await withBrowser({ width: 1200, height: 900 }, async (browser) => {
    const page = await browser.newPage();
    await page.goto(instanceUrl, { waitUntil: 'load' });
    const before = await page.locator('body').innerText();
    expect(/running/i.test(before), 'the instance is not shown as running before its report');
    expect(!before.includes(expected), `${expected} is on the page before the report`);
    await page.screenshot({ path: join(shots, 'live-running.png'), fullPage: true });

    const response = await fetch(reportUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: readFileSync(reportFile, 'utf8'),
    });
    expect(response.ok, `pushing the report answered ${response.status}: ${await response.text()}`);

    // The page's own polling must reload it; nothing here navigates.
    await page.getByText(expected).first().waitFor({ timeout: 20000 });
    await page.screenshot({ path: join(shots, 'live-reported.png'), fullPage: true });
    console.log(`ok: ${instanceUrl} reloaded itself and shows ${expected}`);
  });
} catch (error) {
  failure = `${error.message} (chromium at ${executablePath})`;
}
if (failure) {
  console.error(failure);
  process.exit(1);
}
