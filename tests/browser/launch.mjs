// Headless Chromium as the browser tests launch it: the system's chromium (CI reaches
// the package registries and nothing else, so no Playwright download), an empty
// profile so no earlier state or extension changes what a page shows, and the flags
// Debian's chromium needs to run headless as root. With GPUVET_TEST_TRUSTED_SPKI (the
// base64 sha256 of a test server's public key), that one key is trusted, so pages of a
// server with a certificate from a CA made in the test load over HTTPS; nothing else
// is.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const executablePath = process.env.GPUVET_TEST_CHROMIUM || '/usr/bin/chromium';

// Runs `body(browser)` with a fresh browser, and removes its profile afterwards.
export async function withBrowser(viewport, body) {
  const profile = mkdtempSync(join(tmpdir(), 'gpuvet-chromium-'));
  const trusted = process.env.GPUVET_TEST_TRUSTED_SPKI;
  let browser;
  try {
    browser = await chromium.launchPersistentContext(profile, {
      executablePath,
      headless: true,
      viewport,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        ...(trusted ? [`--ignore-certificate-errors-spki-list=${trusted}`] : []),
      ],
    });
    return await body(browser);
  } finally {
    await browser?.close();
    rmSync(profile, { recursive: true, force: true });
  }
}
