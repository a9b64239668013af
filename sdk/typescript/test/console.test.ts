// The web console in a real browser: Debian's Chromium, headless, driven by
// playwright-core, against the bc-server and bcd nodes on mock GPUs that
// scripts/test-ts starts. Each page's screenshot goes to
// sdk/typescript/screenshots/ (BC_TS_SCREENSHOTS elsewhere), for a reviewer.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";
import type { BrowserContext, Page } from "playwright-core";

import { createClient } from "../src/node.js";
import { env, unique } from "./env.js";

const shots = process.env.BC_TS_SCREENSHOTS ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../screenshots");
const client = createClient({ baseUrl: env.baseUrl, token: env.token });
const tenantId = env.tenant;

let profile: string;
let context: BrowserContext;
let page: Page;
// Every API call the page makes, by method path.
const calls: string[] = [];

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

before(async () => {
  mkdirSync(shots, { recursive: true });
  profile = mkdtempSync(path.join(os.tmpdir(), "bc-console-chromium-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    // The flags Debian's Chromium needs on a machine without a network
    // beyond loopback, as root.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 900 },
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith("/bc.api.v1.")) {
      calls.push(u.pathname);
    }
  });
  page.on("pageerror", (err) => console.error("page error:", err));
});

after(async () => {
  await context?.close();
  rmSync(profile, { recursive: true, force: true });
});

describe("the web console", { timeout: 180_000 }, () => {
  test("sign in with a bearer token: a wrong one is refused, the right one opens the nodes", async () => {
    await page.goto(`${env.baseUrl}/`);
    assert.equal(new URL(page.url()).pathname, "/console/", "bc-server sends / to the console");
    await page.fill("#token", "not-a-token");
    await page.fill("#tenant", tenantId);
    await page.click("#signin button[type=submit]");
    await page.waitForSelector("#signin-error:has-text('UNAUTHENTICATED')");
    await shot("01-sign-in-refused");

    await page.fill("#token", env.token);
    await page.click("#signin button[type=submit]");
    await page.waitForSelector("h1:has-text('Nodes')");
    // The nodes come from nodes.list, not from events: node_offline never
    // had an event or a session, and is listed all the same.
    const row = page.locator(`tr[data-node="${env.faulty}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /node/);
    const healthy = page.locator(`tr[data-node="${env.healthy}"]`);
    const offline = page.locator(`tr[data-node="${env.offline}"]`);
    await offline.waitFor();
    // The sessions, in colour: the healthy node connected, node_offline not.
    assert.equal(await healthy.locator(".session").getAttribute("data-session"), "connected");
    assert.equal(await healthy.locator(".session").innerText(), "connected");
    assert.match(await healthy.locator(".last-seen").innerText(), /just now|\d+ s ago/, "last seen, relative");
    assert.equal(await offline.locator(".session").getAttribute("data-session"), "never");
    assert.match(await offline.locator(".session").innerText(), /never connected/);
    const colour = (l: typeof healthy) => l.locator(".session").evaluate((el) => getComputedStyle(el).backgroundColor);
    assert.notEqual(await colour(healthy), await colour(offline), "connected and not connected differ in colour");
    assert.ok(calls.includes("/bc.api.v1.Nodes/List"), "the page lists the nodes with nodes.list");
    await shot("02-nodes");
  });

  test("run diag.nvml on the faulty node: its failing checks appear live", async () => {
    await page.click(`a[href="#/nodes/${env.faulty}"]`);
    await page.waitForSelector("#run-diag");
    await shot("03-node-commands");
    await page.evaluate(() => ((window as unknown as { noReload: boolean }).noReload = true));
    const before = calls.length;
    await page.click("#run-diag");
    await page.waitForURL(/#\/nodes\/node_faulty\/commands\/cmd_/);
    const commandId = page.url().split("/").pop()!;
    // The checks come when the command settles, through the watch.
    try {
      await page.waitForSelector('#checks tr[data-status="fail"]', { timeout: 60_000 });
    } catch (err) {
      await shot("04-command-diag-nvml-FAILED");
      throw new Error(`no failing checks on the page: ${await page.innerText("#main")}`, { cause: err });
    }
    const failing = await page.locator('#checks tr[data-status="fail"]').evaluateAll((rows) => rows.map((r) => r.getAttribute("data-check")));
    assert.ok(failing.includes("row-remap.pending"), `failing checks: ${failing}`);
    assert.ok(failing.includes("ecc.uncorrectable"), `failing checks: ${failing}`);
    assert.equal(await page.locator('#command [data-state="failed"]').count(), 1, "the command failed");
    assert.match(await page.innerText("#signature"), /signed at enqueue/, "the server signs commands (pki.commandSigning)");
    assert.match(await page.innerText("#requester"), /\(api\)$/, "the command says who asked for it, and how");
    assert.notEqual((await page.innerText("#attestation")).trim(), "");
    assert.equal(await page.evaluate(() => (window as unknown as { noReload?: boolean }).noReload), true, "no page reload");
    const mine = calls.slice(before);
    assert.ok(mine.includes("/bc.api.v1.Events/Watch"), "the page follows the watch");
    assert.ok(!mine.includes("/bc.api.v1.Commands/List"), `no polling of the list: ${mine}`);
    const got = await client.commands.get({ tenantId, nodeId: env.faulty, commandId });
    assert.equal(got.state, "failed");
    await shot("04-command-diag-nvml");

    // Back on the node's commands, newest first: this one on top, failed.
    await page.click(`h1 a[href="#/nodes/${env.faulty}"]`);
    const top = page.locator("#commands tbody tr").first();
    await page.waitForSelector(`#commands tbody tr[data-command="${commandId}"][data-state="failed"]`);
    assert.equal(await top.getAttribute("data-command"), commandId);
  });

  test("cancel a pending command, after a confirmation that says what a cancel can and cannot undo", async () => {
    const pending = await client.commands.run({ tenantId, nodeId: env.offline, kind: "diag.nvml", idempotencyKey: unique("console-cancel") });
    await page.goto(`${env.baseUrl}/console/#/nodes/${env.offline}`);
    const row = page.locator(`#commands tr[data-command="${pending.id}"]`);
    await row.waitFor();
    assert.equal(await row.getAttribute("data-state"), "pending");
    await row.locator("button:has-text('Cancel…')").click();
    const dialog = page.locator("#cancel-dialog");
    await dialog.waitFor();
    const text = await dialog.innerText();
    assert.match(text, /pending command is cancelled at once and never runs/);
    assert.match(text, /is NOT undone/);
    await shot("05-cancel-confirmation");
    await dialog.locator("button:has-text('Cancel the command')").click();
    await page.waitForSelector(`#commands tr[data-command="${pending.id}"][data-state="cancelled"]`);
    const got = await client.commands.get({ tenantId, nodeId: env.offline, commandId: pending.id });
    assert.equal(got.state, "cancelled");
    await shot("06-cancelled");
  });

  test("a batch awaiting approval shows its scope and the exact approve line", async () => {
    const batch = await client.commandBatches.create({ tenantId, reason: "Reboot the offline node after its repair",
      scope: [{ subject: env.offline, kind: "node.reboot" }], idempotencyKey: unique("console-batch") });
    await page.click('nav a[href="#/batches"]');
    const card = page.locator(`section[data-batch="${batch.batchId}"]`);
    await card.waitFor();
    assert.equal(await card.getAttribute("data-state"), "awaiting-approval");
    assert.match(await card.innerText(), /node\.reboot/);
    assert.equal((await card.locator(".approve-line").innerText()).trim(),
      `better-compute batch approve --tenant ${tenantId} --batch ${batch.batchId} --key approver.pem`);
    await shot("07-batches");
  });
});
