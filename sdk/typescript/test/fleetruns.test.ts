// Fleet runs, node labels and the tenant-wide command views from
// TypeScript (issue 30: "The TypeScript client and the MCP server get the
// same"), against the real stack of scripts/test-ts: its bcd nodes
// node_healthy and node_faulty run what the runs queue; node_offline has no
// daemon, so its commands stay pending.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, test } from "node:test";

import { timestampFromDate } from "@bufbuild/protobuf/wkt";

import { ApiError, createClient, fleetRunEnded, toDate } from "../src/node.js";
import type { Event, FleetRun } from "../src/node.js";
import { Later, env, unique } from "./env.js";

const client = createClient({ baseUrl: env.baseUrl, token: env.token });
const tenantId = env.tenant;
// The stack's one identity (scripts/lib/local-stack.sh): every command and
// run the tests create names it as the requester.
const requester = "local-admin";

/** The API error a call threw. */
async function apiError(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ApiError, `not an ApiError: ${err}`);
    return err;
  }
  assert.fail("the call succeeded");
}

/** A label value of this test run's own, so that selectors of earlier runs (and tests) never meet. */
function labelValue(prefix: string): string {
  return unique(prefix).slice(0, 63);
}

/**
 * Opens a watch of the tenant's fleet.run.* events from now and resolves
 * once it is open: what happens after that is seen. match picks the event
 * of a run whose id is known only later (Later.get).
 */
async function watchRuns(types: string[], ms: number, what: string) {
  const ac = new AbortController();
  let opened!: () => void;
  const open = new Promise<void>((resolve) => (opened = resolve));
  const it = client.events.watch({ tenantId, cursor: "now", types }, { signal: ac.signal, onOpen: () => opened() })[Symbol.asyncIterator]();
  const later = new Later(it, (e: Event) => String(e.data?.runId), ms, what);
  await Promise.race([open, later.reading.then(() => Promise.reject(new Error(`an event came before the watch was open (${what})`)))]);
  return {
    later,
    close: async () => {
      ac.abort();
      await it.return?.();
    },
  };
}

describe("nodes.setLabels and nodes.list's selector", () => {
  test("labels set, changed and removed show on the node, and a selector lists exactly the nodes that match", async () => {
    const pool = labelValue("pool");
    const a = await client.nodes.setLabels({ tenantId, nodeId: env.healthy, labels: { "ts-pool": pool, "ts-rack": "r1", "ts-scratch": "x" } });
    assert.equal(a.id, env.healthy, "setLabels returns the node");
    assert.equal(a.labels["ts-pool"], pool);
    assert.equal(a.labels["ts-rack"], "r1");
    const b = await client.nodes.setLabels({ tenantId, nodeId: env.faulty, labels: { "ts-pool": pool, "ts-rack": "r2" } });
    assert.equal(b.labels["ts-rack"], "r2");

    // A change keeps the labels it does not name; remove drops keys.
    const changed = await client.nodes.setLabels({ tenantId, nodeId: env.healthy, labels: { "ts-rack": "r3" }, remove: ["ts-scratch"] });
    assert.equal(changed.labels["ts-pool"], pool, "a label not named is kept");
    assert.equal(changed.labels["ts-rack"], "r3", "a label named is changed");
    assert.equal(changed.labels["ts-scratch"], undefined, "a removed label is gone");
    assert.deepEqual((await client.nodes.get({ tenantId, nodeId: env.healthy })).labels, changed.labels, "nodes.get shows the same labels");

    const ids = async (selector: string) => (await client.nodes.list({ tenantId, selector })).items.map((n) => n.id);
    assert.deepEqual(await ids(`ts-pool=${pool}`), [env.faulty, env.healthy].sort(), "both labelled nodes, by id");
    assert.deepEqual(await ids(`ts-pool=${pool},ts-rack in (r2,r9)`), [env.faulty]);
    assert.deepEqual(await ids(`ts-pool=${pool},ts-rack notin (r2)`), [env.healthy]);
    assert.deepEqual(await ids(`ts-pool=${pool},!ts-scratch`), [env.faulty, env.healthy].sort());

    // replace makes the given labels the node's whole set.
    const replaced = await client.nodes.setLabels({ tenantId, nodeId: env.faulty, labels: { "ts-pool": pool }, replace: true });
    assert.deepEqual({ ...replaced.labels }, { "ts-pool": pool });
  });

  test("bad labels and selectors are INVALID_INPUT naming what was wrong; an unknown node is NOT_FOUND", async () => {
    const badKey = await apiError(client.nodes.setLabels({ tenantId, nodeId: env.healthy, labels: { "-bad key": "v" } }));
    assert.equal(badKey.code, "INVALID_INPUT");
    assert.equal(badKey.details.field, "labels");
    assert.match(badKey.message, /-bad key/);

    const both = await apiError(client.nodes.setLabels({ tenantId, nodeId: env.healthy, labels: { "ts-x": "1" }, remove: ["ts-x"] }));
    assert.equal(both.code, "INVALID_INPUT");
    assert.match(both.message, /both set and removed/);

    const missing = await apiError(client.nodes.setLabels({ tenantId, nodeId: "node_nope", labels: { "ts-x": "1" } }));
    assert.equal(missing.code, "NOT_FOUND");
  });

  // Known server bug (controlplane/api/nodelist.go): nodes.list returns
  // labels.Parse's refusal without mapping it to an API status, so the
  // caller gets INTERNAL (gRPC Unknown) instead of INVALID_INPUT. Drop the
  // todo once it is fixed.
  test("a selector that does not parse is INVALID_INPUT naming selector", { todo: "nodes.list answers INTERNAL for a bad selector (server bug)" }, async () => {
    const sel = await apiError(client.nodes.list({ tenantId, selector: "ts-rack in (r1" }));
    assert.equal(sel.code, "INVALID_INPUT");
    assert.equal(sel.details.field, "selector");
  });
});

describe("fleetRuns", () => {
  test("a run of inventory.refresh over a label selector runs on each bcd node, one at a time, and ends succeeded", async () => {
    const pool = labelValue("run");
    for (const nodeId of [env.healthy, env.faulty]) {
      await client.nodes.setLabels({ tenantId, nodeId, labels: { "ts-run": pool } });
    }
    const key = unique("inventory-run");
    const created = await client.fleetRuns.create({
      tenantId,
      kind: "inventory.refresh",
      payload: { sections: ["gpus"] },
      targets: { selector: `ts-run=${pool}` },
      maxConcurrency: "1",
      maxErrors: "0",
      notAfterSeconds: 300,
      idempotencyKey: key,
      reason: "refresh the rack's inventory",
    });
    assert.match(created.id, /^run_/);
    assert.equal(created.kind, "inventory.refresh");
    assert.equal(created.counts?.targets, 2, "the selector resolved to the two labelled nodes");
    assert.equal(created.concurrencyLimit, 1);
    assert.equal(created.errorLimit, 0);
    assert.equal(created.requester, requester, "the server records who asked");
    assert.equal(created.requestedVia, "api");
    assert.equal(created.batchId, "", "a read-only kind needs no batch");
    assert.deepEqual(created.refused, []);

    const again = await client.fleetRuns.create({ tenantId, kind: "inventory.refresh", payload: { sections: ["gpus"] },
      targets: { selector: `ts-run=${pool}` }, maxConcurrency: "1", idempotencyKey: key });
    assert.equal(again.id, created.id, "a retry with the idempotency key returns the same run");

    // "at most maxConcurrency of the run's commands are open at any time":
    // each state the wait reads is checked.
    const seen: FleetRun[] = [];
    const ended = await client.fleetRuns.wait({ tenantId, runId: created.id }, { onProgress: (r) => void seen.push(r) });
    assert.ok(fleetRunEnded(ended));
    assert.equal(ended.state, "succeeded", `the run ended ${ended.state}: ${ended.stateReason} ${ended.stateMessage}`);
    assert.equal(ended.counts?.succeeded, 2);
    assert.equal(ended.counts?.failures, 0);
    assert.ok(toDate(ended.finishedAt), "finishedAt is set");
    assert.ok(toDate(ended.startedAt), "startedAt is set");
    assert.ok(seen.length >= 1, "onProgress saw the run");
    for (const r of seen) {
      assert.ok((r.counts?.started ?? 0) <= 1, `at most 1 open at once: ${JSON.stringify(r.counts?.byState)}`);
    }

    const { items: targets, nextCursor } = await client.fleetRuns.listTargets({ tenantId, runId: created.id });
    assert.equal(nextCursor, "");
    assert.deepEqual(targets.map((t) => t.nodeId), [env.faulty, env.healthy].sort(), "the targets in order (by id for a selector)");
    assert.deepEqual(targets.map((t) => t.ordinal), [0, 1]);
    for (const t of targets) {
      assert.equal(t.state, "succeeded");
      assert.match(t.commandId, /^cmd_/);
      assert.ok(toDate(t.startedAt) && toDate(t.settledAt));
    }
    assert.ok(toDate(targets[0].settledAt)! <= toDate(targets[1].startedAt)!, "with maxConcurrency 1 the second node started once the first settled");

    // Each node's command is an ordinary command that names its run and requester,
    // found by its id alone.
    for (const t of targets) {
      const c = await client.commands.get({ tenantId, commandId: t.commandId });
      assert.equal(c.nodeId, t.nodeId);
      assert.equal(c.state, "succeeded");
      assert.equal(c.runId, created.id);
      assert.equal(c.requester, requester);
      assert.equal(c.requestedVia, "fleet-run");
    }

    const listed = await client.fleetRuns.list({ tenantId, limit: 200 });
    const mine = listed.items.find((r) => r.id === created.id);
    assert.ok(mine, "fleetRuns.list lists the run");
    assert.equal(mine.state, "succeeded");
    const active = await client.fleetRuns.list({ tenantId, state: "active", limit: 200 });
    assert.ok(!active.items.some((r) => r.id === created.id), "an ended run is not active");
  });

  test("docs/api.md's fleet-run snippet runs as written: inventory.refresh over gpu=h200 ends succeeded", async (t) => {
    // The snippet below is docs/api.md's, line for line.
    const doc = await readFile(new URL("../../../../docs/api.md", import.meta.url), "utf8");
    const self = await readFile(new URL("../../test/fleetruns.test.ts", import.meta.url), "utf8");
    const block = doc.split("```ts\n").map((b) => b.split("```")[0]).find((b) => b.includes("client.fleetRuns.create"));
    assert.ok(block, "docs/api.md has a ts block with client.fleetRuns.create");
    const copy = self.split("// verbatim: docs/api.md fleet runs\n")[1]?.split("// end verbatim")[0];
    assert.ok(copy, "this test holds the copy");
    const lines = (s: string) => s.split("\n").map((l) => l.trim()).filter((l) => l !== "");
    assert.deepEqual(lines(copy), lines(block), "the copy below is docs/api.md's snippet");

    for (const nodeId of [env.healthy, env.faulty]) {
      await client.nodes.setLabels({ tenantId, nodeId, labels: { gpu: "h200" } });
    }
    const logged: unknown[][] = [];
    t.mock.method(console, "log", (...a: unknown[]) => void logged.push(a));
    let result: { run: FleetRun; ended: FleetRun };
    {
      // verbatim: docs/api.md fleet runs
      // inventory.refresh on every node labelled gpu=h200, two at a time.
      const run = await client.fleetRuns.create({
        tenantId,
        kind: 'inventory.refresh',
        targets: { selector: 'gpu=h200' },
        maxConcurrency: '2',
        idempotencyKey: 'refresh-h200-0412',
      });
      const ended = await client.fleetRuns.wait({ tenantId, runId: run.id }, {
        onProgress: (r) => console.log(r.state, r.counts?.succeeded, 'of', r.counts?.targets),
      });
      if (ended.state !== 'succeeded') {
        const { items } = await client.fleetRuns.listTargets({ tenantId, runId: run.id, state: 'failures' });
        for (const t of items) console.log(t.nodeId, t.state, t.reason, t.message);
      }
      // end verbatim
      result = { run, ended };
    }
    t.mock.restoreAll();
    assert.equal(result.ended.state, "succeeded", JSON.stringify(logged));
    assert.equal(result.ended.concurrencyLimit, 2);
    assert.deepEqual(logged.at(-1), ["succeeded", 2, "of", 2], "the last progress line: both nodes");
  });

  test("a run over node_offline can be paused, resumed and cancelled: its pending command is cancelled and the run ends cancelled", async () => {
    const created = await client.fleetRuns.create({ tenantId, kind: "diag.nvml", targets: { nodeIds: [env.offline] },
      maxConcurrency: "100%", idempotencyKey: unique("offline-run") });
    assert.equal(created.counts?.targets, 1);

    const paused = await client.fleetRuns.pause({ tenantId, runId: created.id });
    assert.equal(paused.state, "paused");
    const resumed = await client.fleetRuns.resume({ tenantId, runId: created.id });
    assert.equal(resumed.state, "running");
    assert.equal((await client.fleetRuns.resume({ tenantId, runId: created.id })).state, "running", "resuming a running run changes nothing");

    const cancelling = await client.fleetRuns.cancel({ tenantId, runId: created.id });
    assert.ok(["cancelling", "cancelled"].includes(cancelling.state), cancelling.state);
    assert.ok(toDate(cancelling.cancelRequestedAt));
    const ended = await client.fleetRuns.wait({ tenantId, runId: created.id });
    assert.equal(ended.state, "cancelled");
    assert.equal(ended.stateReason, "cancelled");
    const late = await apiError(client.fleetRuns.pause({ tenantId, runId: created.id }));
    assert.equal(late.code, "INVALID_STATE", "an ended run cannot be paused");
    assert.equal(late.details.state, "cancelled");

    const { items } = await client.fleetRuns.listTargets({ tenantId, runId: created.id });
    assert.equal(items.length, 1);
    assert.ok(["cancelled", "not-started"].includes(items[0].state), `the offline node never ran: ${items[0].state}`);
    if (items[0].commandId !== "") {
      const c = await client.commands.get({ tenantId, commandId: items[0].commandId });
      assert.equal(c.state, "cancelled", "its pending command was cancelled");
    }
  });

  // Known server bug (controlplane/api/fleetruns.go, Create): the payload
  // check (queue.Check) runs without a batch id, so with the batch quorum
  // on (approver keys, as here) every destructive kind is refused
  // batch-required before the run's own batch exists. Drop the todo once
  // it is fixed.
  test("a destructive run waits for its batch's approvals, saying so; the batch names every target",
    { todo: "fleetRuns.create refuses node.reboot batch-required under the quorum (server bug)" }, async () => {
    const watch = await watchRuns(["fleet.run.waiting"], 60_000, "the reboot run's fleet.run.waiting");
    try {
      const created = await client.fleetRuns.create({ tenantId, kind: "node.reboot", targets: { nodeIds: [env.offline] },
        reason: "reboot after the kernel update", idempotencyKey: unique("reboot-run") });
      assert.match(created.batchId, /^batch_/);
      const waiting = await watch.later.get(created.id);
      assert.equal(waiting.data?.reason, "awaiting-approval");
      const run = await client.fleetRuns.get({ tenantId, runId: created.id });
      assert.equal(run.waitingReason, "awaiting-approval");
      assert.match(run.waitingMessage, /better-compute batch approve/);
      assert.equal(run.counts?.started, 0, "nothing starts before the approvals");

      const batch = await client.commandBatches.get({ tenantId, batchId: created.batchId });
      assert.equal(batch.state, "awaiting-approval");
      assert.deepEqual(batch.scope.map((l) => [l.subject, l.kind]), [[env.offline, "node.reboot"]]);

      const ended = await client.fleetRuns.cancel({ tenantId, runId: created.id }).then(() => client.fleetRuns.wait({ tenantId, runId: created.id }));
      assert.equal(ended.state, "cancelled");
      assert.equal(ended.counts?.notStarted, 1, "the node never started");
    } finally {
      await watch.close();
    }
  });

  test("fleetRuns.wait rejects with the API's error for an unknown run, and with the signal's reason once aborted", async () => {
    const unknown = await apiError(client.fleetRuns.wait({ tenantId, runId: "run_01JDZX8R4W5V6Y7Z8A9B0C1D2E" }));
    assert.equal(unknown.code, "NOT_FOUND");

    // node_offline never settles its command: the wait would go on.
    const run = await client.fleetRuns.create({ tenantId, kind: "diag.nvml", targets: { nodeIds: [env.offline] }, idempotencyKey: unique("abort-wait") });
    const ac = new AbortController();
    const stop = new Error("the caller stopped waiting");
    const waiting = client.fleetRuns.wait({ tenantId, runId: run.id }, { signal: ac.signal, onProgress: () => ac.abort(stop) });
    await assert.rejects(waiting, (err: unknown) => err === stop);
    const cancelled = await client.fleetRuns.cancel({ tenantId, runId: run.id }).then(() => client.fleetRuns.wait({ tenantId, runId: run.id }));
    assert.equal(cancelled.state, "cancelled");
  });

  test("bad input is INVALID_INPUT naming what was wrong; an unknown run is NOT_FOUND", async () => {
    const cases: [string, Parameters<typeof client.fleetRuns.create>[0], string][] = [
      ["no targets", { tenantId, kind: "diag.nvml", targets: {} }, "targets"],
      ["a selector that does not parse", { tenantId, kind: "diag.nvml", targets: { selector: "gpu in (h200" } }, "selector"],
      ["maxConcurrency 0", { tenantId, kind: "diag.nvml", targets: { nodeIds: [env.healthy] }, maxConcurrency: "0" }, "maxConcurrency"],
      ["maxConcurrency over 100%", { tenantId, kind: "diag.nvml", targets: { nodeIds: [env.healthy] }, maxConcurrency: "150%" }, "maxConcurrency"],
      ["maxErrors negative", { tenantId, kind: "diag.nvml", targets: { nodeIds: [env.healthy] }, maxErrors: "-1" }, "maxErrors"],
      ["an unknown label key", { tenantId, kind: "diag.nvml", targets: { selector: "ts-never-set-key=1" } }, "selector"],
    ];
    for (const [what, req, field] of cases) {
      const err = await apiError(client.fleetRuns.create(req));
      assert.equal(err.code, "INVALID_INPUT", `${what}: ${err.code} ${err.message}`);
      assert.equal(err.details.field, field, `${what}: ${JSON.stringify(err.details)}`);
    }
    const unknown = await apiError(client.fleetRuns.get({ tenantId, runId: "run_01JDZX8R4W5V6Y7Z8A9B0C1D2E" }));
    assert.equal(unknown.code, "NOT_FOUND");
    assert.equal(unknown.reason, "run-not-found");
  });
});

describe("commands across the tenant", () => {
  test("commands.list without nodeId lists the tenant's commands newest first, filtered; commands.get takes an id alone", async () => {
    const since = new Date(Date.now() - 1000);
    const a = await client.commands.run({ tenantId, nodeId: env.offline, kind: "diag.nvml", idempotencyKey: unique("tenant-list-a") });
    const b = await client.commands.run({ tenantId, nodeId: env.offline, kind: "inventory.refresh", idempotencyKey: unique("tenant-list-b") });
    assert.equal(a.requester, requester, "commands.run records who asked");
    assert.equal(a.requestedVia, "api");
    assert.equal(a.runId, "");

    const sinceTs = timestampFromDate(since);
    const all = await client.commands.list({ tenantId, since: sinceTs, requester, limit: 200 });
    const ids = all.items.map((c) => c.id);
    assert.ok(ids.includes(a.id) && ids.includes(b.id), "both commands, on any node");
    assert.ok(ids.indexOf(b.id) < ids.indexOf(a.id), "newest first");
    for (const c of all.items) {
      assert.equal(c.requester, requester);
      assert.ok(toDate(c.createdAt)! >= since);
    }

    const byKind = await client.commands.list({ tenantId, since: sinceTs, kind: "inventory.refresh", state: "pending" });
    assert.ok(byKind.items.some((c) => c.id === b.id));
    assert.ok(byKind.items.every((c) => c.kind === "inventory.refresh" && c.state === "pending"));
    assert.ok(!byKind.items.some((c) => c.id === a.id));

    const page = await client.commands.list({ tenantId, since: sinceTs, requester, limit: 1 });
    assert.equal(page.items.length, 1);
    assert.notEqual(page.nextCursor, "");
    const page2 = await client.commands.list({ tenantId, since: sinceTs, requester, limit: 1, cursor: page.nextCursor });
    assert.equal(page2.items[0]?.id, ids[1], "the next page starts after the last");

    const got = await client.commands.get({ tenantId, commandId: a.id });
    assert.equal(got.nodeId, env.offline);
    assert.equal(got.kind, "diag.nvml");

    const missing = await apiError(client.commands.get({ tenantId, commandId: "cmd_01JDZX8R4W5V6Y7Z8A9B0C1D2E" }));
    assert.equal(missing.code, "NOT_FOUND");
    const range = await apiError(client.commands.list({ tenantId, since: sinceTs, until: sinceTs }));
    assert.equal(range.code, "INVALID_INPUT");
    assert.equal(range.details.field, "until");

    for (const c of [a, b]) {
      await client.commands.cancel({ tenantId, nodeId: env.offline, commandId: c.id });
    }
  });
});
