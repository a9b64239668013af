// Debian's Chromium, headless, driven by playwright-core, for the console's
// tests; screenshots go to sdk/typescript/screenshots/ (BC_TS_SCREENSHOTS
// elsewhere), for a reviewer.
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";
import type { BrowserContext, Page } from "playwright-core";

export const shots = process.env.BC_TS_SCREENSHOTS ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../screenshots");

/** A browser with one page; calls lists every API call the page made, by method path. */
export interface Browser {
  context: BrowserContext;
  page: Page;
  calls: string[];
  shot(name: string): Promise<void>;
  close(): Promise<void>;
}

export async function launch(): Promise<Browser> {
  mkdirSync(shots, { recursive: true });
  const profile = mkdtempSync(path.join(os.tmpdir(), "bc-console-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    // The flags Debian's Chromium needs on a machine without a network
    // beyond loopback, as root.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 900 },
    acceptDownloads: true,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const calls: string[] = [];
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith("/bc.api.v1.")) {
      calls.push(u.pathname);
    }
  });
  page.on("pageerror", (err) => console.error("page error:", err));
  return {
    context, page, calls,
    shot: async (name) => {
      await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
    },
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Signs the page in at baseUrl's console and waits for the overview. */
export async function signIn(page: Page, baseUrl: string, token: string, tenantId: string): Promise<void> {
  await page.goto(`${baseUrl}/console/#/`);
  await page.evaluate(() => sessionStorage.clear());
  // A new document: the page's own session is gone with the storage.
  await page.reload();
  await page.fill("#token", token);
  await page.fill("#tenant", tenantId);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("h1:has-text('Fleet overview')");
}
