// The web console in a real browser: Debian's Chromium, headless, driven by
// playwright-core, against the bc-server and bcd nodes on mock GPUs that
// scripts/test-ts starts. Each page's screenshot goes to
// sdk/typescript/screenshots/ (BC_TS_SCREENSHOTS elsewhere), for a reviewer.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, test } from "node:test";

import type { Page } from "playwright-core";

import { createClient } from "../src/node.js";
import { launch, signIn } from "./browser.js";
import type { Browser } from "./browser.js";
import { Proxy, env, unique } from "./env.js";

const client = createClient({ baseUrl: env.baseUrl, token: env.token });
const tenantId = env.tenant;

let b: Browser;
let page: Page;

before(async () => {
  b = await launch();
  page = b.page;
  // fleet run cancel asks with confirm(): the tests accept it.
  page.on("dialog", (d) => void d.accept());
});

after(async () => {
  await b?.close();
});

/** The nodes the table lists, in order. */
async function listed(): Promise<string[]> {
  return page.locator("#nodes tbody tr[data-node]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-node")!));
}

describe("the web console", { timeout: 240_000 }, () => {
  test("sign in with a bearer token: a wrong one is refused, the right one opens the fleet overview", async () => {
    await page.goto(`${env.baseUrl}/`);
    assert.equal(new URL(page.url()).pathname, "/console/", "bc-server sends / to the console");
    await page.fill("#token", "not-a-token");
    await page.fill("#tenant", tenantId);
    await page.click("#signin button[type=submit]");
    await page.waitForSelector("#signin-error:has-text('UNAUTHENTICATED')");
    await b.shot("01-sign-in-refused");

    await page.fill("#token", env.token);
    await page.click("#signin button[type=submit]");
    await page.waitForSelector("h1:has-text('Fleet overview')");
    assert.equal(await page.evaluate(() => JSON.parse(sessionStorage.getItem("bc-console")!).tenantId), tenantId, "the sign-in stays in the tab");
    // The counts are fleet.summary's, as the API gives them.
    const s = await client.fleet.summary({ tenantId });
    await page.waitForSelector(`#count-nodes[data-count="${s.nodes}"]`);
    assert.equal(await page.getAttribute("#count-connected", "data-count"), String(s.connected));
    assert.ok(s.commandSigning, "the stack signs commands");
    assert.equal(await page.locator("#signing-warning").count(), 0, "no signing warning where commands are signed");
    await page.waitForSelector("#live[data-live=live]");
    await page.waitForSelector("#plan");
    assert.ok(b.calls.includes("/bc.api.v1.Reconciler/Plan"), "the overview shows the reconciler's plan");
    await b.shot("02-overview");
  });

  test("the node list: sessions in colour, filters on the server kept in the URL, keyboard navigation", async () => {
    await page.click("#count-nodes");
    await page.waitForSelector("h1:has-text('Nodes')");
    const healthy = page.locator(`tr[data-node="${env.healthy}"]`);
    const offline = page.locator(`tr[data-node="${env.offline}"]`);
    await offline.waitFor();
    assert.equal(await healthy.locator(".session").getAttribute("data-session"), "connected");
    assert.match(await healthy.locator(".last-seen").innerText(), /just now|\d+ s ago/, "last seen, relative");
    assert.equal(await offline.locator(".session").getAttribute("data-session"), "never");
    const colour = (l: typeof healthy) => l.locator(".session").evaluate((el) => getComputedStyle(el).backgroundColor);
    assert.notEqual(await colour(healthy), await colour(offline), "connected and not connected differ in colour");
    await b.shot("03-nodes");

    // A text search, on the server: the hash holds it, so the link works.
    await page.fill("#filter-query", "offline");
    const before = b.calls.length;
    await page.click("#node-filters button[type=submit]");
    await page.waitForFunction(() => location.hash === "#/nodes?query=offline");
    await page.waitForFunction(() => document.querySelectorAll("#nodes tbody tr[data-node]").length === 1);
    assert.deepEqual(await listed(), [env.offline]);
    assert.ok(b.calls.slice(before).includes("/bc.api.v1.Nodes/List"), "the filter is a nodes.list call");
    await page.reload();
    await page.waitForSelector(`#nodes tr[data-node="${env.offline}"]`);
    assert.equal(await page.inputValue("#filter-query"), "offline", "a reload keeps the filter");
    // Not connected: node_offline; a filter that matches nothing says so.
    await page.goto(`${env.baseUrl}/console/#/nodes?connected=false&query=node_`);
    await page.waitForSelector(`#nodes tr[data-node="${env.offline}"]`);
    assert.ok(!(await listed()).includes(env.healthy));
    await page.goto(`${env.baseUrl}/console/#/nodes?query=no-such-node`);
    await page.waitForSelector("#nodes tr.empty:has-text('no node you may read matches')");
    await b.shot("04-nodes-no-match");

    // The keyboard: Tab reaches the rows, arrows move, Enter opens one.
    await page.goto(`${env.baseUrl}/console/#/nodes`);
    await page.waitForSelector(`#nodes tr[data-node="${env.offline}"]`);
    await page.focus("#node-filters a");
    await page.keyboard.press("Tab");
    const first = (await listed())[0]!;
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("data-node")), first, "Tab after the filters reaches the first row");
    await page.keyboard.press("ArrowDown");
    const second = (await listed())[1]!;
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("data-node")), second);
    await page.keyboard.press("Enter");
    await page.waitForFunction((id) => location.hash === `#/nodes/${id}`, second);
    await page.waitForSelector(`h1:has-text('Node ${second}')`);
  });

  test("the faulty node's page: its GPUs show the injected faults; diag.nvml's payload form checks the schema in the browser", async () => {
    await page.goto(`${env.baseUrl}/console/#/nodes/${env.faulty}`);
    // The node reports its inventory with inventory.refresh: run it from the form (no payload).
    await page.click('#actions button[data-kind="inventory.refresh"]');
    await page.waitForSelector("#payload-sections");
    await page.click("#run-submit");
    await page.waitForURL(/#\/nodes\/node_faulty\/commands\/cmd_/);
    await page.waitForSelector('#command-state [data-state="succeeded"]', { timeout: 60_000 });
    await page.click(`h1 a[href="#/nodes/${env.faulty}"]`);
    await page.waitForSelector("#gpus tbody tr");
    // scripts/test-ts injects a pending row remap on GPU 3 and uncorrectable ECC errors on GPU 5.
    await page.waitForSelector('#gpus tr[data-gpu="3"] .rows [data-bad="true"]');
    assert.match(await page.innerText('#gpus tr[data-gpu="3"] .rows'), /remap pending/);
    assert.equal(await page.getAttribute('#gpus tr[data-gpu="5"] .ecc [data-bad]', "data-bad"), "true");
    assert.equal(await page.getAttribute('#gpus tr[data-gpu="0"] .rows [data-bad]', "data-bad"), "false");
    assert.match(await page.innerText('#gpus tr[data-gpu="0"]'), /0000:/, "the bus id");
    // Every kind commands.run accepts has an action.
    const kinds = (await client.kinds.list({ apiRunnableOnly: true })).items.filter((k) => k.newest).map((k) => k.name).sort();
    await page.waitForSelector(`#actions button[data-kind="${kinds[0]}"]`);
    const shown = (await page.locator("#actions button[data-kind]").evaluateAll((l) => l.map((x) => x.getAttribute("data-kind")!))).sort();
    assert.deepEqual(shown, kinds);
    // node.reboot is destructive: it says that it needs an approved batch.
    await page.click('#actions button[data-kind="node.reboot"]');
    assert.match(await page.innerText(".destructive-note"), /only under an approved batch/);
    await page.click('#actions button[data-kind="diag.nvml"]');
    await page.waitForSelector("#payload-expectedCount");
    // 2000 is over the schema's maximum (1024): the browser refuses it, and no command is queued.
    await page.fill("#payload-expectedCount", "2000");
    const before = b.calls.length;
    await page.click("#run-submit");
    await page.waitForSelector("#payload-problems");
    assert.match(await page.innerText("#payload-problems"), /expectedCount/);
    assert.ok(!b.calls.slice(before).includes("/bc.api.v1.Commands/Run"), "an invalid payload is not sent");
    await b.shot("05-node-payload-refused");
    await page.fill("#payload-expectedCount", "");
    await page.check("#payload-refresh");
    await page.evaluate(() => ((window as unknown as { noReload: boolean }).noReload = true));
    const mark = b.calls.length;
    await page.click("#run-submit");
    await page.waitForURL(/#\/nodes\/node_faulty\/commands\/cmd_/);
    const commandId = page.url().split("/").pop()!;
    try {
      await page.waitForSelector('#checks tr[data-status="fail"]', { timeout: 60_000 });
    } catch (err) {
      await b.shot("06-command-diag-nvml-FAILED");
      throw new Error(`no failing checks on the page: ${await page.innerText("#main")}`, { cause: err });
    }
    const failing = await page.locator('#checks tr[data-status="fail"]').evaluateAll((rows) => rows.map((r) => r.getAttribute("data-check")));
    assert.ok(failing.includes("row-remap.pending"), `failing checks: ${failing}`);
    assert.ok(failing.includes("ecc.uncorrectable"), `failing checks: ${failing}`);
    assert.equal(await page.locator('#command [data-state="failed"]').count(), 1, "the command failed");
    assert.match(await page.innerText("#signature"), /signed at enqueue/);
    assert.match(await page.innerText("#requester"), /\(api\)$/, "the command says who asked for it, and how");
    assert.equal(await page.evaluate(() => (window as unknown as { noReload?: boolean }).noReload), true, "no page reload");
    const mine = b.calls.slice(mark);
    assert.ok(mine.includes("/bc.api.v1.Events/Watch"), "the page follows the watch");
    assert.ok(!mine.includes("/bc.api.v1.Commands/List"), `no polling of the list: ${mine}`);
    const got = await client.commands.get({ tenantId, nodeId: env.faulty, commandId });
    assert.equal(got.state, "failed");
    assert.deepEqual(got.payload, { refresh: true }, "the form's payload");
    await b.shot("06-command-diag-nvml");

    // Back on the node: this command on top, failed; the node unhealthy with its failed checks.
    await page.click(`h1 a[href="#/nodes/${env.faulty}"]`);
    await page.waitForSelector(`#commands tbody tr[data-command="${commandId}"][data-state="failed"]`);
    assert.equal(await page.locator("#commands tbody tr").first().getAttribute("data-command"), commandId);
    await page.waitForSelector('#node-head [data-health="unhealthy"]');
    await b.shot("07-node-faulty");
  });

  test("after the diag: the overview counts the failed check, and its link lists the faulty node", async () => {
    await page.click('nav a[href="#/overview"]');
    await page.waitForSelector('#by-failed-check a[data-check="row-remap.pending"]');
    await page.click('#by-failed-check a[data-check="row-remap.pending"]');
    await page.waitForFunction(() => location.hash === "#/nodes?failedCheck=row-remap.pending");
    await page.waitForSelector(`#nodes tr[data-node="${env.faulty}"] [data-health="unhealthy"]`);
    assert.deepEqual(await listed(), [env.faulty]);
    await page.goto(`${env.baseUrl}/console/#/nodes?health=unhealthy`);
    await page.waitForSelector(`#nodes tr[data-node="${env.faulty}"]`);
    assert.ok(!(await listed()).includes(env.healthy), "the healthy node is not unhealthy");
    await b.shot("08-nodes-unhealthy");
  });

  test("cancel a pending command, after a confirmation that says what a cancel can and cannot undo", async () => {
    const pending = await client.commands.run({ tenantId, nodeId: env.offline, kind: "diag.nvml", idempotencyKey: unique("console-cancel") });
    await page.goto(`${env.baseUrl}/console/#/nodes/${env.offline}`);
    const row = page.locator(`#commands tr[data-command="${pending.id}"]`);
    await row.waitFor();
    assert.equal(await row.getAttribute("data-state"), "pending");
    assert.match(await page.innerText("#gpus-none"), /No GPU inventory yet/, "a node that never reported has no GPU table");
    await row.locator("button:has-text('Cancel…')").click();
    const dialog = page.locator("#cancel-dialog");
    await dialog.waitFor();
    const text = await dialog.innerText();
    assert.match(text, /pending command is cancelled at once and never runs/);
    assert.match(text, /is NOT undone/);
    await b.shot("09-cancel-confirmation");
    await dialog.locator("button:has-text('Cancel the command')").click();
    await page.waitForSelector(`#commands tr[data-command="${pending.id}"][data-state="cancelled"]`);
    assert.equal((await client.commands.get({ tenantId, nodeId: env.offline, commandId: pending.id })).state, "cancelled");
    await b.shot("10-cancelled");
  });

  test("logs.collect from the form: the command page downloads its support bundle with the tab's token", async () => {
    await page.goto(`${env.baseUrl}/console/#/nodes/${env.healthy}`);
    await page.click('#actions button[data-kind="logs.collect"]');
    await page.waitForSelector("#payload-since");
    assert.equal(await page.locator("#payload-uploadUrl").count(), 0, "the fields the control plane fills are not in the form");
    await page.fill("#payload-since", "1h");
    await page.click("#run-submit");
    await page.waitForURL(/#\/nodes\/node_healthy\/commands\/cmd_/);
    await page.waitForSelector("#bundle-download", { timeout: 90_000 });
    const [download] = await Promise.all([page.waitForEvent("download"), page.click("#bundle-download")]);
    const file = await download.path();
    const bytes = await readFile(file);
    assert.ok(bytes.length > 0, "the bundle has bytes");
    assert.deepEqual([...bytes.subarray(0, 2)], [0x1f, 0x8b], "a gzip stream");
    await page.waitForSelector("#bundle-state:has-text('saved')");
    await b.shot("11-command-logs-collect");
  });

  test("batches: one awaiting approval shows its scope and the exact approve line, and its page lists its commands", async () => {
    const batch = await client.commandBatches.create({ tenantId, reason: "Reboot the offline node after its repair",
      scope: [{ subject: env.offline, kind: "node.reboot" }], idempotencyKey: unique("console-batch") });
    const held = await client.commands.run({ tenantId, nodeId: env.offline, kind: "node.reboot", batchId: batch.batchId, idempotencyKey: unique("console-held") });
    await page.click('nav a[href="#/batches"]');
    const card = page.locator(`section[data-batch="${batch.batchId}"]`);
    await card.waitFor();
    assert.equal(await card.getAttribute("data-state"), "awaiting-approval");
    assert.match(await card.innerText(), /node\.reboot/);
    assert.equal((await card.locator(".approve-line").innerText()).trim(),
      `better-compute batch approve --tenant ${tenantId} --batch ${batch.batchId} --key approver.pem`);
    await b.shot("12-batches");
    await card.locator("a.batch-commands").click();
    await page.waitForSelector(`#batch-commands tr[data-command="${held.id}"]`);
    assert.match(await page.innerText(`#batch-commands tr[data-command="${held.id}"]`), /awaiting approval/);
    await b.shot("13-batch-commands");
    // The overview lists it as awaiting, with the line.
    await page.click('nav a[href="#/overview"]');
    await page.waitForSelector(`#awaiting li[data-batch="${batch.batchId}"]`);
    assert.match(await page.innerText(`#awaiting li[data-batch="${batch.batchId}"]`), /better-compute batch approve/);
    await client.commands.cancel({ tenantId, nodeId: env.offline, commandId: held.id });
  });

  test("fleet runs: created from the console, followed live to the end; a waiting one paused, resumed and cancelled", async () => {
    await page.click('nav a[href="#/runs"]');
    await page.click("#new-run");
    try {
      // Preact sets an option's value as a property, not an attribute.
      await page.waitForFunction(() => [...document.querySelectorAll<HTMLOptionElement>("#run-kind option")].some((o) => o.value === "diag.nvml"));
    } catch (err) {
      await b.shot("14-new-run-FAILED");
      throw new Error(`no kinds to choose: ${page.url()} ${await page.innerText("#main")}`, { cause: err });
    }
    await page.selectOption("#run-kind", "diag.nvml");
    await page.fill("#run-nodes", env.healthy);
    await page.fill("#run-concurrency", "1");
    await page.fill("#run-errors", "0");
    await page.fill("#run-reason", "console test");
    await b.shot("14-new-run");
    await page.click("#run-create");
    await page.waitForURL(/#\/runs\/run_/);
    const runId = page.url().split("/").pop()!;
    try {
      await page.waitForSelector('#run[data-state="succeeded"]', { timeout: 90_000 });
    } catch (err) {
      await b.shot("15-run-FAILED");
      throw new Error(`the run did not succeed: ${await page.innerText("#main")}`, { cause: err });
    }
    assert.equal(await page.getAttribute(".run-progress", "data-done"), "1");
    await page.waitForSelector(`#run-targets tr[data-node="${env.healthy}"][data-state="succeeded"]`);
    await b.shot("15-run-succeeded");
    assert.equal((await client.fleetRuns.get({ tenantId, runId })).state, "succeeded");

    // On node_offline the command never runs: pause, resume, cancel.
    const run = await client.fleetRuns.create({ tenantId, kind: "diag.nvml", targets: { nodeIds: [env.offline] }, maxConcurrency: "1", idempotencyKey: unique("console-run") });
    await page.goto(`${env.baseUrl}/console/#/runs/${run.id}`);
    await page.waitForSelector("#run-pause");
    await page.click("#run-pause");
    await page.waitForSelector('#run[data-state="paused"]');
    await page.click("#run-resume");
    await page.waitForSelector('#run[data-state="running"]');
    await page.click("#run-cancel");
    await page.waitForSelector('#run[data-state="cancelled"]', { timeout: 60_000 });
    await b.shot("16-run-cancelled");
    await page.click('nav a[href="#/runs"]');
    await page.waitForSelector(`#runs tr[data-run="${run.id}"][data-state="cancelled"]`);
    await page.waitForSelector(`#runs tr[data-run="${runId}"][data-state="succeeded"]`);
  });

  test("empty states: a node with no commands, a batch with none", async () => {
    const node = await client.nodes.create({ tenantId, nodeId: `node_empty_${Date.now().toString(36)}` });
    await page.goto(`${env.baseUrl}/console/#/nodes/${node.id}`);
    await page.waitForSelector("#commands tr.empty:has-text('no commands on this node yet')");
    assert.match(await page.innerText("#gpus-none"), /No GPU inventory yet/);
    const batch = await client.commandBatches.create({ tenantId, reason: "nothing yet", scope: [{ subject: node.id, kind: "node.reboot" }], idempotencyKey: unique("console-empty") });
    await page.goto(`${env.baseUrl}/console/#/batches/${batch.batchId}`);
    await page.waitForSelector("#batch-commands tr.empty:has-text('no command has been queued')");
    await b.shot("17-empty-batch");
    await client.nodes.delete({ tenantId, nodeId: node.id });
  });

  test("a lost connection: the live badge says so, and the page recovers with what happened meanwhile", async () => {
    const proxy = await Proxy.start(env.proxyTarget);
    try {
      await signIn(page, proxy.url, env.token, tenantId);
      await page.goto(`${proxy.url}/console/#/nodes/${env.offline}`);
      await page.waitForSelector("#live[data-live=live]");
      await page.waitForSelector("#commands tbody tr");
      proxy.blocked = true;
      proxy.cut();
      await page.waitForSelector("#live[data-live=reconnecting]");
      assert.match(await page.innerText("#live"), /connection lost/);
      await b.shot("18-connection-lost");
      // Meanwhile, a command is queued.
      const c = await client.commands.run({ tenantId, nodeId: env.offline, kind: "inventory.refresh", idempotencyKey: unique("console-lost") });
      proxy.blocked = false;
      await page.waitForSelector("#live[data-live=live]", { timeout: 30_000 });
      await page.waitForSelector(`#commands tr[data-command="${c.id}"][data-state="pending"]`);
      await b.shot("19-connection-recovered");
      await client.commands.cancel({ tenantId, nodeId: env.offline, commandId: c.id });
      await page.waitForSelector(`#commands tr[data-command="${c.id}"][data-state="cancelled"]`);
    } finally {
      await proxy.close();
    }
  });

  test("a control plane that does not sign: every page warns, and a batch there is audit-only", { skip: env.unsignedUrl === "" && "BC_TS_UNSIGNED_URL is not set" }, async () => {
    // That server has a database of its own: a tenant and a node there.
    const unsigned = createClient({ baseUrl: env.unsignedUrl, token: env.token });
    const t = (await unsigned.nodes.createTenant({ name: "unsigned" })).id;
    const node = await unsigned.nodes.create({ tenantId: t });
    assert.equal((await unsigned.fleet.summary({ tenantId: t })).commandSigning, false);
    await signIn(page, env.unsignedUrl, env.token, t);
    for (const to of ["#/overview", "#/nodes", `#/nodes/${node.id}`, "#/runs", "#/batches"]) {
      await page.goto(`${env.unsignedUrl}/console/${to}`);
      await page.waitForSelector("#signing-warning");
      assert.match(await page.innerText("#signing-warning"), /Commands go unsigned.*docs\/trust\.md/s, `the warning on ${to}`);
    }
    await b.shot("20-unsigned-warning");
    const batch = await unsigned.commandBatches.create({ tenantId: t, reason: "audit only", scope: [{ subject: node.id, kind: "node.reboot" }], idempotencyKey: unique("console-audit") });
    assert.equal(batch.threshold, 0);
    await page.goto(`${env.unsignedUrl}/console/#/batches/${batch.batchId}`);
    await page.waitForSelector('[data-audit-only="true"]');
    const card = await page.innerText(`section[data-batch="${batch.batchId}"]`);
    assert.match(card, /needs no approval/);
    assert.doesNotMatch(card, /none yet/, "never 'Approvals: none yet' on an audit-only batch");
    assert.equal(await page.locator(".approve-line").count(), 0);
    await b.shot("21-audit-only-batch");
  });
});
