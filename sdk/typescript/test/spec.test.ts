// The spec's TypeScript snippets (the spec: commands.md), each run as
// written against a real bc-server and bcd nodes on mock GPUs
// (scripts/test-ts). Each snippet is copied verbatim between the
// "verbatim" markers, inside a block so that its consts do not collide;
// only the variables it uses (client, tenantId, nodeId) are set up around it.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Code } from "@connectrpc/connect";

import { ApiError, createClient } from "../src/node.js";
import type { Event } from "../src/node.js";
import { env, nextMatching, unique } from "./env.js";

const client = createClient({ baseUrl: env.baseUrl, token: env.token });
const tenantId = env.tenant;

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

describe("the spec's snippets", () => {
  // "Running a command": commands.run with the spec's fields.
  test("Running a command: commands.run queues inventory.refresh (spec: Running a command)", async () => {
    const nodeId = env.healthy;
    let first;
    {
      // verbatim: spec "Running a command"
      const command = await client.commands.run({
        tenantId,
        nodeId,
        kind: 'inventory.refresh',
        payload: { sections: ['gpus'], rescan: true },
        idempotencyKey: 'refresh-after-gpu-swap-0412',
        notAfterSeconds: 300,
      });
      // { id: 'cmd_…', seq: 42, state: 'pending', notAfter: …, retrySafe: true, … }
      // end verbatim
      first = command;
    }
    assert.match(first.id, /^cmd_/);
    assert.ok(first.seq > 0, "a per-node seq");
    assert.equal(first.state, "pending", "commands.run returns the command as queued");
    assert.equal(first.retrySafe, true);
    assert.deepEqual(first.payload, { sections: ["gpus"], rescan: true });
    const notAfter = Number(first.notAfter!.seconds) - Number(first.createdAt!.seconds);
    assert.ok(notAfter >= 299 && notAfter <= 301, `notAfter is notAfterSeconds after createdAt (${notAfter} s)`);

    // "a retry returns the command already queued"
    {
      // verbatim: spec "Running a command" (the same call again)
      const command = await client.commands.run({
        tenantId,
        nodeId,
        kind: 'inventory.refresh',
        payload: { sections: ['gpus'], rescan: true },
        idempotencyKey: 'refresh-after-gpu-swap-0412',
        notAfterSeconds: 300,
      });
      // end verbatim
      assert.equal(command.id, first.id);
      assert.equal(command.seq, first.seq);
    }

    // "the same key for another kind is CONFLICT", with its details.
    const err = await apiError(client.commands.run({ tenantId, nodeId, kind: "diag.nvml", idempotencyKey: "refresh-after-gpu-swap-0412" }));
    assert.equal(err.code, "CONFLICT");
    assert.equal(err.reason, "idempotency-key-reused");
    assert.deepEqual(err.details, { reason: "idempotency-key-reused", kind: "inventory.refresh", commandId: first.id });
    assert.match(err.message, /idempotency key already names command/);
  });

  // "Destructive commands under the quorum": the server runs with approver
  // keys (scripts/test-ts), so node.reboot needs a batch.
  test("Destructive commands under the quorum: batch-required, then the batch snippet holds the reboot (spec: Destructive commands under the quorum)", async () => {
    const nodeId = env.healthy;
    // "node.reboot without a batchId is INVALID_STATE with details: { reason: 'batch-required', kind }"
    const refused = await apiError(client.commands.run({ tenantId, nodeId, kind: "node.reboot", idempotencyKey: unique("unbatched") }));
    assert.equal(refused.code, "INVALID_STATE");
    assert.equal(refused.reason, "batch-required");
    assert.equal(refused.details.kind, "node.reboot");

    let created;
    {
      // verbatim: spec "Destructive commands under the quorum"
      const batch = await client.commandBatches.create({
        tenantId,
        reason: 'Reboot node_0412 after the kernel update',
        scope: [{ subject: nodeId, kind: 'node.reboot' }], // payloadSha256 (hex) would bind one exact payload
        idempotencyKey: 'reboot-0412-batch',
      });
      await client.commands.run({ tenantId, nodeId, kind: 'node.reboot', idempotencyKey: 'reboot-0412', batchId: batch.batchId });
      // pending until the batch is approved: better-compute batch approve --tenant … --batch batch_… --key approver.pem
      // end verbatim
      created = batch;
    }
    assert.match(created.batchId, /^batch_/);
    assert.equal(created.batchId, created.id);
    assert.equal(created.state, "awaiting-approval");
    assert.equal(created.approvalsNeeded, 2);

    // "while it waits for approvals awaitingApproval: true and no notBefore"
    const { items } = await client.commands.list({ tenantId, nodeId, state: "pending" });
    const reboot = items.find((c) => c.kind === "node.reboot" && c.batchId === created.batchId);
    assert.ok(reboot, "the batched reboot is pending");
    assert.equal(reboot.awaitingApproval, true);
    assert.equal(reboot.notBefore, undefined);
  });

  test("Cancelling: the snippet as written, whose id is a placeholder, is INVALID_INPUT naming the field (spec: Cancelling)", async () => {
    const nodeId = env.offline;
    const err = await apiError((async () => {
      // verbatim: spec "Cancelling"
      const command = await client.commands.cancel({ tenantId, nodeId, commandId: 'cmd_…' });
      // end verbatim
      return command;
    })());
    assert.equal(err.code, "INVALID_INPUT");
    assert.equal(err.details.field, "commandId", JSON.stringify(err.details));
  });

  test("Cancelling: an unknown id is NOT_FOUND, with its details (spec: Cancelling)", async () => {
    // "an unknown id (or a node your tenant cannot see) is NOT_FOUND"
    const nodeId = env.offline;
    const commandId = "cmd_00000000000000000000000000";
    const err = await apiError(client.commands.cancel({ tenantId, nodeId, commandId }));
    assert.equal(err.code, "NOT_FOUND");
    assert.equal(err.connectCode, Code.NotFound);
    assert.equal(err.reason, "command-not-found");
    assert.deepEqual(err.details, { reason: "command-not-found", nodeId, commandId });
  });

  test("Cancelling: a pending command becomes cancelled at once (spec: Cancelling)", async () => {
    const nodeId = env.offline;
    const pending = await client.commands.run({ tenantId, nodeId, kind: "diag.nvml", idempotencyKey: unique("to-cancel") });
    assert.equal(pending.state, "pending");
    // The snippet with its placeholder, 'cmd_…', filled in.
    const command = await client.commands.cancel({ tenantId, nodeId, commandId: pending.id });
    assert.equal(command.state, "cancelled");
    const again = await client.commands.cancel({ tenantId, nodeId, commandId: pending.id });
    assert.equal(again.state, "cancelled", "a terminal command is returned unchanged");
  });

  test("Results: a watch sees command.settled, then commands.list shows the failed diag.nvml (spec: Results)", async (t) => {
    const nodeId = env.faulty;
    // From the oldest retained event (no cursor), so that the watch cannot
    // start after the settle it waits for.
    // The signal ends the watch in finally (see client.test.ts).
    const ac = new AbortController();
    const watch = client.events.watch({ tenantId, nodeId, types: ["command.settled"] }, { signal: ac.signal });
    const it = watch[Symbol.asyncIterator]();
    try {
      // Read only once the id is known (the watch starts at the oldest
      // event, so nothing is missed): an event read before would not be
      // recognised.
      const diag = await client.commands.run({ tenantId, nodeId, kind: "diag.nvml", idempotencyKey: unique("diag") });
      const e = await nextMatching(it, (e: Event) => e.data?.commandId === diag.id, 60_000, "command.settled of diag.nvml");
      assert.equal(e.type, "command.settled");
      assert.equal(e.nodeId, nodeId);
      assert.equal(e.data?.state, "failed", "the faulty node's diag.nvml fails");
      assert.equal(e.data?.kind, "diag.nvml");
      assert.ok(watch.cursor !== "" && watch.cursor === e.cursor, "the watch keeps the cursor of the last event");
    } finally {
      ac.abort();
      await it.return?.();
    }

    const logged: unknown[][] = [];
    t.mock.method(console, "log", (...a: unknown[]) => void logged.push(a));
    {
      // verbatim: spec "Results"
      const { items } = await client.commands.list({ tenantId, nodeId, state: 'failed', limit: 20 });
      for (const command of items) console.log(command.seq, command.kind, command.reason);
      // end verbatim
    }
    t.mock.restoreAll();
    assert.ok(logged.length >= 1, "at least the failed diag.nvml");
    for (const [seq, kind, reason] of logged) {
      assert.equal(typeof seq, "number");
      assert.equal(kind, "diag.nvml");
      assert.equal(typeof reason, "string");
      assert.notEqual(reason, "");
    }
  });
});

before(async () => {
  // The stack is up: a node answers.
  const n = await client.nodes.get({ tenantId, nodeId: env.healthy });
  assert.equal(n.id, env.healthy);
});
after(() => {});
