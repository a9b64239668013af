// A node's page: its session and health, its GPUs (from its inventory), its
// conditions, the kinds its last Hello reported (against the registry) and
// the plugin files its bcd refused, an action for every kind commands.run
// accepts (the payload form generated from the kind's schema and checked in
// the browser against it), and its commands, newest first, live through
// events.watch.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";

import type { Command, Kind, Node } from "../../../sdk/typescript/src/web.js";
import { NodeKinds, RefusedPlugins } from "./blocked.js";
import { CommandsTable, mergeCommand } from "./commands.js";
import { Ago, Conditions, ErrorLine, HealthBadge, LiveBadge, SessionBadge, api, errorText, href, newKey, tenant, useFollow } from "./core.js";
import { GPUTable } from "./gpus.js";
import { SchemaForm, checkPayload } from "./schemaform.js";
import type { Json } from "./schemaform.js";

/** The kinds commands.run accepts, read once per tab. */
let kindsOnce: Promise<Kind[]> | undefined;
export function apiRunnableKinds(): Promise<Kind[]> {
  kindsOnce ??= api().kinds.list({ apiRunnableOnly: true }).then((r) => r.items.filter((k) => k.newest));
  kindsOnce.catch(() => (kindsOnce = undefined));
  return kindsOnce;
}

/** What a destructive kind needs, in words. */
export function destructiveNote(k: Kind): JSX.Element | null {
  if (!k.flags?.destructive) {
    return null;
  }
  return (
    <p class="warning destructive-note">
      {k.name} is destructive: a node runs it only under an approved batch. Create one whose scope names this node and {k.name}{" "}
      (<code>better-compute batch create</code>), have it approved (<code>better-compute batch approve</code>, where the approvers' keys are), then give its id here.
    </p>
  );
}

function Actions({ nodeId, onQueued }: { nodeId: string; onQueued: (c: Command) => void }): JSX.Element {
  const [kinds, setKinds] = useState<Kind[]>();
  const [chosen, setChosen] = useState("");
  const [payload, setPayload] = useState<Record<string, Json>>({});
  const [batchId, setBatchId] = useState("");
  const [problems, setProblems] = useState<string[]>([]);
  const [err, setErr] = useState<unknown>();
  useEffect(() => {
    apiRunnableKinds().then(setKinds, setErr);
  }, []);
  const kind = kinds?.find((k) => k.name === chosen);
  const run = async (e: Event) => {
    e.preventDefault();
    if (!kind) {
      return;
    }
    const bad = checkPayload(kind, payload);
    setProblems(bad);
    setErr(undefined);
    if (bad.length > 0) {
      return;
    }
    try {
      const c = await api().commands.run({ tenantId: tenant(), nodeId, kind: kind.name, payload, batchId: batchId.trim(), idempotencyKey: newKey("run") });
      onQueued(c);
      // Its page shows it as it runs.
      location.hash = `#/nodes/${nodeId}/commands/${c.id}`;
    } catch (x) {
      setErr(x);
    }
  };
  return (
    <form id="actions" class="actions" onSubmit={run} noValidate>
      <h2>Run a command</h2>
      {kinds === undefined && !err ? <p class="muted">loading the kinds…</p> : null}
      <div class="kind-buttons" role="group" aria-label="kinds">
        {kinds?.map((k) => (
          <button type="button" key={k.name} data-kind={k.name} class={k.name === chosen ? "chosen" : ""} title={k.description}
            onClick={() => { setChosen(k.name); setPayload({}); setProblems([]); setErr(undefined); }}>
            {k.name}{k.flags?.destructive ? " ⚠" : ""}
          </button>
        ))}
      </div>
      {kind ? (
        <div class="run-kind" data-kind={kind.name}>
          <p>{kind.description}</p>
          {destructiveNote(kind)}
          <SchemaForm kind={kind} onChange={setPayload} key={kind.name} />
          {kind.flags?.destructive ? <label>Batch <input id="run-batch" placeholder="batch_…" value={batchId} onInput={(e) => setBatchId(e.currentTarget.value)} /></label> : null}
          <button type="submit" id="run-submit">Run {kind.name}</button>
          {problems.length > 0 ? (
            <ul class="error" id="payload-problems" role="alert">{problems.map((p) => <li key={p}>{p}</li>)}</ul>
          ) : null}
        </div>
      ) : null}
      {err ? <p class="error" id="run-error" role="alert">{errorText(err)}</p> : null}
    </form>
  );
}

function NodeHead({ n }: { n: Node }): JSX.Element {
  return (
    <div id="node-head">
      <p>
        <SessionBadge n={n} />, last seen <Ago t={n.lastSeen} />; <HealthBadge n={n} />
        {n.checkedAt ? <span class="muted"> (checked <Ago t={n.checkedAt} />)</span> : <span class="muted"> (no diag.nvml yet)</span>}
      </p>
      <p>
        Pool <a href={href("nodes", { pool: n.pool })}>{n.pool}</a>, role {n.role}, agent {n.agentVersion || "unknown"}, trust bundle{" "}
        {n.trustVersion > 0n ? `v${n.trustVersion}` : "none"}, applied spec generation {String(n.appliedGeneration)}, registered <Ago t={n.createdAt} />
        {Object.keys(n.labels).length ? <>; labels {Object.entries(n.labels).map(([k, v]) => <code key={k}>{v ? `${k}=${v}` : k} </code>)}</> : null}
      </p>
    </div>
  );
}

const newestFirst = (a: Command, b: Command) => b.seq - a.seq;

export function NodePage({ nodeId }: { nodeId: string }): JSX.Element {
  const [node, setNode] = useState<Node>();
  const [commands, setCommands] = useState<Command[]>();
  const [err, setErr] = useState<unknown>();
  const put = (c: Command) => setCommands((old) => mergeCommand(old ?? [], c, newestFirst));
  const readNode = () => api().nodes.get({ tenantId: tenant(), nodeId }).then(setNode, setErr);
  const load = () => {
    void readNode();
    api().commands.list({ tenantId: tenant(), nodeId, limit: 50 }).then((r) => setCommands((old) => r.items.reduce((l, c) => mergeCommand(l, c, newestFirst), old ?? [])), setErr);
  };
  // Every event of the node (queued, progress, cancel requested, settled)
  // names its command: read that one again; the node too, since a settled
  // diag.nvml changes its health.
  const live = useFollow({ tenantId: tenant(), nodeId }, (e) => {
    const id = e.data?.commandId;
    if (typeof id === "string") {
      api().commands.get({ tenantId: tenant(), nodeId, commandId: id }).then(put, setErr);
    }
    if (e.type === "command.settled" || e.type.startsWith("node.")) {
      void readNode();
    }
  }, load, [nodeId]);
  return (
    <section>
      <h1>Node {nodeId} <LiveBadge live={live} /></h1>
      <ErrorLine err={err} />
      {node ? <NodeHead n={node} /> : null}
      <h2>GPUs</h2>
      {node ? <GPUTable inventory={node.inventory} /> : <p class="muted">loading…</p>}
      <h2>Conditions</h2>
      {node ? <Conditions n={node} /> : null}
      <h2>Kinds (its last Hello)</h2>
      {node ? <><RefusedPlugins n={node} /><NodeKinds n={node} /></> : null}
      <Actions nodeId={nodeId} onQueued={put} />
      <h2>Commands (newest first)</h2>
      {commands === undefined ? <p class="muted">loading…</p> : (
        <CommandsTable id="commands" items={commands} empty="no commands on this node yet"
          onChange={(c, x) => (c ? put(c) : setErr(x))} />
      )}
    </section>
  );
}
