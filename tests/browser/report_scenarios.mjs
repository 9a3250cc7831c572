// Opens gpuvet's static HTML report (`check --html`) of each fault scenario in headless
// Chromium from a file:// address, as the person who gets the page would, and checks
// what they read first: the verdict naming the culprit above the findings (no verdict
// for a healthy group), at most MAX_ROWS rows in the folded findings table, no code
// word such as `never_joined` in the verdict or the group section, the expected texts,
// and nothing fetched. Saves a full-page screenshot of each as SCREENSHOT_DIR/NAME.png.
// Run by crates/gpuvet/tests/cli/html_report.rs:
//
//   node tests/browser/report_scenarios.mjs SCENARIOS.json SCREENSHOT_DIR
//
// SCENARIOS.json: [{"name", "html", "culprit" (null: healthy), "max_rows", "texts": []}].
// Exits 0 when every scenario shows what it expects, else 1 with every reason.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { executablePath, withBrowser } from './launch.mjs';

const [spec, shots] = process.argv.slice(2);
if (!spec || !shots) {
  console.error('usage: node report_scenarios.mjs SCENARIOS.json SCREENSHOT_DIR');
  process.exit(2);
}
const scenarios = JSON.parse(readFileSync(spec, 'utf8'));

// Incident and status names as the JSON spells them; a person reads them in words.
const CODE_WORDS = /\b(never_joined|timed_out|peer_error|not_run|not_implemented)\b/;

// What is wrong with one scenario's page, or null.
async function check(page, scenario) {
  const url = pathToFileURL(resolve(scenario.html)).href;
  const fetched = [];
  const onRequest = (request) => {
    if (request.url() !== url) fetched.push(request.url());
  };
  page.on('request', onRequest);
  try {
    await page.goto(url, { waitUntil: 'load' });
    await page.screenshot({ path: join(shots, `${scenario.name}.png`), fullPage: true });
    const problems = [];
    const text = await page.locator('body').innerText();
    const missing = scenario.texts.filter((needle) => !text.includes(needle));
    if (missing.length > 0) problems.push(`not on the page: ${JSON.stringify(missing)}`);
    const verdict = page.locator('#verdict');
    if (scenario.culprit === null) {
      if ((await verdict.count()) > 0) problems.push('a healthy group has a verdict block');
    } else if ((await verdict.count()) !== 1 || !(await verdict.isVisible())) {
      problems.push('no visible verdict block');
    } else {
      const said = await verdict.innerText();
      if (!said.includes(scenario.culprit)) {
        problems.push(`the verdict does not name ${scenario.culprit}: ${said}`);
      }
      const verdictBox = await verdict.boundingBox();
      const findingsBox = await page.locator('#findings').boundingBox();
      if (!(verdictBox.y < findingsBox.y)) problems.push('the verdict is not above the findings');
    }
    for (const where of ['#verdict', '#group']) {
      if ((await page.locator(where).count()) === 0) continue;
      const words = await page.locator(where).innerText();
      const code = words.match(CODE_WORDS);
      if (code) problems.push(`${where} says \`${code[0]}\` instead of words`);
    }
    const rows = await page.locator('#findings table.folded > tbody > tr').count();
    if (rows > scenario.max_rows) {
      problems.push(`${rows} folded finding rows, more than ${scenario.max_rows}`);
    }
    if (fetched.length > 0) problems.push(`the page fetched ${JSON.stringify(fetched)}`);
    if (problems.length > 0) return `${scenario.name}: ${problems.join('; ')}`;
    console.log(`ok: ${scenario.name}: ${rows} folded finding row(s), culprit ${scenario.culprit}`);
    return null;
  } finally {
    page.off('request', onRequest);
  }
}

let failures = [];
try {
  failures = await withBrowser({ width: 1100, height: 900 }, async (browser) => {
    const page = await browser.newPage();
    const found = [];
    for (const scenario of scenarios) {
      const problem = await check(page, scenario);
      if (problem) found.push(problem);
    }
    return found;
  });
} catch (error) {
  failures = [`chromium at ${executablePath}: ${error.message}`];
}
if (failures.length > 0) {
  console.error(failures.join('\n'));
  process.exit(1);
}
