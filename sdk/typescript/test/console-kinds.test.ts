// The console's kinds (issue 33: registered kinds are visible in the
// console; a command that cannot progress says why), in a real browser
// against the stack scripts/test-ts starts: the Kinds page and a kind's
// page with its schema, a node's kinds from its Hello, and a command held
// because its node does not load its kind (BC_TS_UNLOADED_KIND,
// example.echo: registered in bc-server's kindsDir and allowlisted, its
// plugin on no node). Screenshots go where console.test.ts's go. On its own:
//
//   scripts/with-postgres scripts/test-ts \
//     sh -c 'npx tsc -p tsconfig.json && node --test --test-concurrency=1 dist/test/console-kinds.test.js'
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { Page } from "playwright-core";

import { createClient } from "../src/node.js";
import { launch, signIn } from "./browser.js";
import type { Browser } from "./browser.js";
import { env, unique } from "./env.js";

const client = createClient({ baseUrl: env.baseUrl, token: env.token });
const tenantId = env.tenant;
const unloaded = process.env.BC_TS_UNLOADED_KIND ?? "";

let b: Browser;
let page: Page;

before(async () => {
  b = await launch();
  page = b.page;
  await signIn(page, env.baseUrl, env.token, tenantId);
});

after(async () => {
  await b?.close();
});

describe("the console's kinds", { timeout: 180_000, skip: unloaded === "" && "BC_TS_UNLOADED_KIND is not set" }, () => {
  test("the Kinds page lists every registered kind version with its digest and compatible versions, and a kind's page shows its schema", async () => {
    await page.click('nav a[href="#/kinds"]');
    await page.waitForSelector("#kinds tbody tr[data-kind]");
    const { items } = await client.kinds.list({});
    const rows = await page.locator("#kinds tbody tr[data-kind]").evaluateAll((l) => l.map((r) => `${r.getAttribute("data-kind")}@${r.getAttribute("data-version")}`));
    assert.deepEqual(rows, items.map((k) => `${k.name}@${k.version}`), "every kind version kinds.list gives, in its order");

    const echo = items.find((k) => k.name === unloaded)!;
    assert.ok(echo, `${unloaded} is registered`);
    const row = page.locator(`#kinds tr[data-kind="${unloaded}"][data-version="${echo.version}"]`);
    const digest = row.locator(".digest-cell .digest");
    assert.equal(await digest.getAttribute("title"), echo.digest, "the whole digest on hover");
    assert.equal(await digest.innerText(), `${echo.digest.slice(0, 12)}…`, "the digest, short");
    assert.equal((await row.locator(".compatible").innerText()).trim(), "^1");
    assert.equal(await row.locator("[data-runnable]").getAttribute("data-runnable"), "true", "allowlisted and apiRunnable");
    assert.match(await row.innerText(), /kinds-dir/);
    assert.match(await row.innerText(), /retry-safe/);
    // A first-party kind that commands.run does not accept says why not.
    const reset = page.locator('#kinds tr[data-kind="gpu.reset"]');
    assert.match(await reset.locator(".runnable").innerText(), /not allowlisted/);
    assert.match(await reset.innerText(), /first-party/);
    await b.shot("40-kinds");

    await row.locator("a").click();
    await page.waitForFunction((h) => location.hash === h, `#/kinds/${unloaded}/${echo.version}`);
    await page.waitForSelector(`#kind[data-kind="${unloaded}"]`);
    assert.equal(await page.innerText("#kind-digest"), echo.digest);
    assert.match(await page.innerText("#kind-compatible"), /\^1/);
    assert.match(await page.innerText('#schema-fields tr[data-field="message"]'), /string\s+required/);
    assert.match(await page.innerText('#schema-fields tr[data-field="sleepMs"]'), /maximum 60000/);
    assert.deepEqual(JSON.parse(await page.innerText("#kind-schema")), JSON.parse(echo.payloadSchema), "the schema as kinds.get gives it");
    assert.ok(b.calls.includes("/bc.api.v1.Kinds/Get"), "the page reads kinds.get");
    await b.shot("41-kind-example-echo");

    // An unknown kind: the page says so.
    await page.goto(`${env.baseUrl}/console/#/kinds/no.such-kind`);
    await page.waitForSelector(".error:has-text('NOT_FOUND')");
  });

  test("a node's page lists the kinds its Hello reported, as the registry sees each", async () => {
    const node = await client.nodes.get({ tenantId, nodeId: env.healthy });
    assert.ok(node.kinds.length > 0, "the healthy node reported its kinds");
    await page.goto(`${env.baseUrl}/console/#/nodes/${env.healthy}`);
    await page.waitForSelector('#node-kinds tr[data-kind="diag.nvml"]');
    const shown = await page.locator("#node-kinds tbody tr").evaluateAll((l) => l.map((r) => [r.getAttribute("data-kind"), r.getAttribute("data-status")]));
    assert.deepEqual(shown.map((x) => x.join(" ")).sort(), node.kinds.map((k) => `${k.kind} ${k.status}`).sort());
    const diag = node.kinds.find((k) => k.kind === "diag.nvml")!;
    assert.equal(diag.status, "registered");
    assert.equal(await page.getAttribute('#node-kinds tr[data-kind="diag.nvml"] .digest', "title"), diag.digest);
    assert.match(await page.innerText('#node-kinds tr[data-kind="diag.nvml"]'), new RegExp(`${diag.version.replace(/\./g, "\\.")}`));
    assert.equal(await page.locator(`#node-kinds tr[data-kind="${unloaded}"]`).count(), 0, `the node does not load ${unloaded}`);
    assert.equal(await page.locator("#kind-mismatch-note").count(), 0, "no mismatch: no warning");
    assert.equal(await page.locator("#refused-plugins").count(), 0, "no refused plugin: no warning");
    await b.shot("42-node-kinds");
    // A node that never connected has no Hello.
    await page.goto(`${env.baseUrl}/console/#/nodes/${env.offline}`);
    await page.waitForSelector("#node-kinds-none:has-text('never connected')");
  });

  test("a command whose node does not load its kind shows what blocks it while it waits, and that it was blocked once it expired", async () => {
    const c = await client.commands.run({ tenantId, nodeId: env.healthy, kind: unloaded, payload: { message: "held" },
      notAfterSeconds: 20, idempotencyKey: unique("console-blocked") });
    await page.goto(`${env.baseUrl}/console/#/nodes/${env.healthy}/commands/${c.id}`);
    try {
      await page.waitForSelector('#blocked-by[data-reason="kind-not-loaded"][data-active="true"]', { timeout: 15_000 });
    } catch (err) {
      await b.shot("43-command-blocked-FAILED");
      throw new Error(`no block on the page: ${await page.innerText("#main")}`, { cause: err });
    }
    assert.equal(await page.getAttribute("#command-state [data-state]", "data-state"), "pending");
    const block = await page.innerText("#blocked-by");
    assert.match(block, /^Blocked by kind-not-loaded/);
    assert.match(block, new RegExp(`node ${env.healthy} does not load ${unloaded.replace(".", "\\.")}`));
    assert.match(block, /What to do: install the plugin that serves/);
    assert.equal(await page.getAttribute("#blocked-by", "role"), "alert", "it stands out while the command waits");
    assert.match(await page.innerText("#waiting"), /^kind-not-loaded \(what blocks it, and the fix, are above\)/);
    await b.shot("43-command-blocked");

    // The sweeper expires it at notAfter; the block stays, as what it was.
    await page.waitForSelector('#blocked-by[data-active="false"]', { timeout: 60_000 });
    assert.equal(await page.getAttribute("#command-state [data-state]", "data-state"), "expired");
    assert.match(await page.innerText("#blocked-by"), /^Was blocked by kind-not-loaded\s+It ended expired/);
    const got = await client.commands.get({ tenantId, nodeId: env.healthy, commandId: c.id });
    assert.equal(got.blockedBy?.reason, "kind-not-loaded");
    assert.match(await page.innerText("#command"), new RegExp(`Message\\s+it waited: node ${env.healthy} does not load`));
    await b.shot("44-command-was-blocked");
  });
});
