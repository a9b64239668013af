// The client's own behaviour: typed errors, the watch's resume after a
// reconnect, the node view.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ApiError, createClient } from "../src/node.js";
import type { Event } from "../src/node.js";
import { Later, Proxy, env, nextMatching, unique } from "./env.js";

const client = createClient({ baseUrl: env.baseUrl, token: env.token });
const tenantId = env.tenant;

describe("errors", () => {
  test("an unknown token is UNAUTHENTICATED", async () => {
    const stranger = createClient({ baseUrl: env.baseUrl, token: "not-a-token" });
    await assert.rejects(stranger.nodes.get({ tenantId, nodeId: env.healthy }), (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.code, "UNAUTHENTICATED");
      assert.equal(err.message, "unknown bearer token");
      return true;
    });
  });

  test("a node that does not exist is NOT_FOUND, with its details", async () => {
    await assert.rejects(client.nodes.get({ tenantId, nodeId: "node_nope" }), (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.code, "NOT_FOUND");
      assert.equal(err.details.nodeId, "node_nope");
      return true;
    });
  });

  test("a bad request is INVALID_INPUT naming the field", async () => {
    await assert.rejects(client.commands.run({ tenantId, nodeId: env.healthy, kind: "diag.nvml", idempotencyKey: unique("k"), notAfterSeconds: 5 }),
      (err: unknown) => {
        assert.ok(err instanceof ApiError);
        assert.equal(err.code, "INVALID_INPUT");
        assert.ok(Object.keys(err.details).length > 0, `details: ${JSON.stringify(err.details)}`);
        return true;
      });
  });
});

describe("events.watch", () => {
  let proxy: Proxy & { url: string };
  before(async () => {
    proxy = await Proxy.start(env.proxyTarget);
  });
  after(async () => {
    await proxy.close();
  });

  test("resumes from its cursor after a reconnect: no event lost, none twice", async () => {
    const through = createClient({ baseUrl: proxy.url, token: env.token });
    const nodeId = env.offline;
    const reconnects: string[] = [];
    // The signal ends the watch in finally, so that a timeout fails with
    // its reason (return() alone would wait for the pending next()).
    const ac = new AbortController();
    const watch = through.events.watch({ tenantId, nodeId, types: ["node.command.queued"] },
      { signal: ac.signal, minDelayMs: 50, maxDelayMs: 200, onReconnect: (err, cursor) => void reconnects.push(`${err.code}@${cursor}`) });
    const it = watch[Symbol.asyncIterator]();
    const run = () => client.commands.run({ tenantId, nodeId, kind: "diag.nvml", idempotencyKey: unique("resume") });
    try {
      // The watch starts at the oldest event, so it is read only once the
      // id is known: its event cannot come too early to be recognised.
      const a = await run();
      const ea = await nextMatching(it, (e: Event) => e.data?.commandId === a.id, 30_000, "the first command's node.command.queued");

      // The network breaks, and stays down while two more commands queue.
      proxy.blocked = true;
      proxy.cut();
      const b = await run();
      const c = await run();
      proxy.blocked = false;

      const seen: string[] = [];
      const eb = await nextMatching(it, (e) => (seen.push(String(e.data?.commandId)), e.data?.commandId === c.id), 30_000,
        "the third command's node.command.queued after the reconnect");
      assert.deepEqual(seen, [b.id, c.id], "after the reconnect: the commands queued while it was down, in order, once each");
      assert.ok(watch.reconnects >= 1, "the watch reconnected");
      assert.ok(reconnects.length >= 1);
      assert.ok(reconnects.every((r) => r.endsWith(`@${ea.cursor}`)), `it resumed after the last event it yielded: ${reconnects}`);
      assert.equal(watch.cursor, eb.cursor);
    } finally {
      ac.abort();
      await it.return?.();
    }
  });

  test("a watch from \"now\" says when it is open, with the cursor it starts after: what happens next is seen", async () => {
    const nodeId = env.offline;
    let opened!: (cursor: string) => void;
    const open = new Promise<string>((resolve) => (opened = resolve));
    // The signal ends the watch in finally: return() alone would wait for
    // the next() still pending after a timeout, and hide the failure.
    const ac = new AbortController();
    const reconnects: string[] = [];
    const watch = client.events.watch({ tenantId, nodeId, cursor: "now", types: ["node.command.queued"] },
      { signal: ac.signal, onOpen: (c) => opened(c), onReconnect: (err, cursor) => void reconnects.push(`${err.code} ${err.message}@${cursor}`) });
    const it = watch[Symbol.asyncIterator]();
    try {
      const seen = new Later(it, (e: Event) => String(e.data?.commandId), 30_000, "the command queued after the watch opened");
      // A watch that fails before it opens ends the reading with its error:
      // race them, so that such a failure is named instead of waiting forever.
      const start = await Promise.race([open, seen.reading.then(() => Promise.reject(new Error("an event came before the watch said it was open")))]);
      assert.notEqual(start, "now");
      assert.notEqual(start, "", "the server resolved now to a cursor");
      assert.equal(watch.cursor, start, "a reconnect before any event resumes there");
      const id = (await client.commands.run({ tenantId, nodeId, kind: "diag.nvml", idempotencyKey: unique("after-open") })).id;
      await seen.get(id).catch((err: Error) => {
        throw new Error(`${err.message} (opened at ${start}; reconnects: ${reconnects.join(", ") || "none"})`);
      });
    } finally {
      ac.abort();
      await it.return?.();
    }
  });

  test("an error a reconnect cannot mend ends the watch with it", async () => {
    const reader = createClient({ baseUrl: env.baseUrl, token: "not-a-token" });
    const it = reader.events.watch({ tenantId })[Symbol.asyncIterator]();
    await assert.rejects(it.next(), (err: unknown) => err instanceof ApiError && err.code === "UNAUTHENTICATED");
  });
});

describe("nodes", () => {
  test("nodes.list lists the tenant's nodes by id with their sessions: the healthy node connected, node_offline not", async () => {
    const { items, nextCursor } = await client.nodes.list({ tenantId });
    assert.equal(nextCursor, "");
    const ids = items.map((n) => n.id);
    assert.deepEqual(ids, [...ids].sort(), "by id");
    for (const id of [env.healthy, env.faulty, env.offline]) {
      assert.ok(ids.includes(id), `${id} listed`);
    }
    const healthy = items.find((n) => n.id === env.healthy)!;
    assert.equal(healthy.connected, true);
    assert.ok(healthy.connectedSince, "since when");
    assert.ok(healthy.lastSeen, "last seen");
    assert.equal(healthy.disconnectedAt, undefined);
    assert.notEqual(healthy.gateway, "");
    assert.notEqual(healthy.agentVersion, "", "the daemon's version from its Hello");
    assert.notEqual(healthy.bootId, "");
    assert.equal(healthy.role, "node");
    const offline = items.find((n) => n.id === env.offline)!;
    assert.equal(offline.connected, false);
    assert.equal(offline.connectedSince, undefined, "node_offline never had a session");
    assert.equal(offline.lastSeen, undefined);

    const first = await client.nodes.list({ tenantId, limit: 1 });
    assert.equal(first.items.length, 1);
    assert.notEqual(first.nextCursor, "");
    const second = await client.nodes.list({ tenantId, limit: 1, cursor: first.nextCursor });
    assert.equal(second.items[0]?.id, ids[1], "the next page starts after the last");
  });

  test("nodes.get shows a joined node: its role and the trust bundle it holds", async () => {
    const n = await client.nodes.get({ tenantId, nodeId: env.faulty });
    assert.equal(n.id, env.faulty);
    assert.equal(n.role, "node");
    assert.ok(n.trustVersion >= 1n, "the node reported the trust bundle it holds (command signing is on)");
  });
});

describe("fleet, kinds, pools and reconciler", () => {
  test("fleet.summary counts the tenant's nodes and says that commands are signed", async () => {
    const s = await client.fleet.summary({ tenantId });
    const { items } = await client.nodes.list({ tenantId });
    assert.equal(s.nodes, BigInt(items.length));
    assert.equal(s.connected, BigInt(items.filter((n) => n.connected).length));
    assert.equal(s.healthy + s.unhealthy, s.nodes);
    assert.equal(s.commandSigning, true, "scripts/test-ts signs commands");
    assert.equal(s.approvalThreshold, 2);
    assert.ok(s.asOf);
  });

  test("kinds.list with apiRunnableOnly gives the kinds commands.run accepts, each with its schema; kinds.get of an unknown kind is NOT_FOUND", async () => {
    const { items } = await client.kinds.list({ apiRunnableOnly: true });
    const diag = items.find((k) => k.name === "diag.nvml" && k.newest);
    assert.ok(diag, "diag.nvml is API-runnable");
    assert.ok(diag.apiRunnable && diag.allowlisted);
    assert.equal((JSON.parse(diag.payloadSchema) as { type: string }).type, "object");
    assert.ok(items.every((k) => k.apiRunnable && k.allowlisted));
    assert.equal((await client.kinds.get({ name: "diag.nvml" })).name, "diag.nvml");
    await assert.rejects(client.kinds.get({ name: "no.such-kind" }), (err: unknown) => err instanceof ApiError && err.code === "NOT_FOUND");
  });

  test("pools.list and reconciler.plan answer through the same error mapping", async () => {
    const pools = await client.pools.list({ tenantId });
    assert.ok(pools.items.some((p) => p.name === "default"), "the nodes' pool");
    const plan = await client.reconciler.plan({ tenantId });
    assert.ok(Array.isArray(plan.items));
    await assert.rejects(client.pools.get({ tenantId, pool: "no-such-pool" }), (err: unknown) => err instanceof ApiError && err.code === "NOT_FOUND");
  });
});
