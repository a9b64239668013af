// Fleet runs: the list, a form that creates one (kind, targets, concurrency,
// error limit, the payload from the kind's schema), and a run's page with
// its progress live on the fleet.run.* events (read again after each of
// the run's events, as client.fleetRuns.wait does), pause, resume, cancel.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";

import { fleetRunEnded, fleetRunEventTypes } from "../../../sdk/typescript/src/web.js";
import type { FleetRun, FleetRunTarget, Kind } from "../../../sdk/typescript/src/web.js";
import { Ago, ErrorLine, LiveBadge, Muted, State, api, errorText, newKey, rowKeys, tenant, useFollow } from "./core.js";
import { apiRunnableKinds, destructiveNote } from "./node.js";
import { SchemaForm, checkPayload } from "./schemaform.js";
import type { Json } from "./schemaform.js";

function Progress({ r }: { r: FleetRun }): JSX.Element {
  const c = r.counts;
  if (!c) {
    return <Muted>—</Muted>;
  }
  const done = c.succeeded + c.failures + c.cancelled + c.notStarted;
  const pct = c.targets > 0 ? Math.round((100 * done) / c.targets) : 100;
  return (
    <span class="run-progress" data-done={String(done)} data-targets={String(c.targets)}>
      <progress max={c.targets || 1} value={done} /> {done}/{c.targets} ({pct}%): {c.succeeded} succeeded, {c.failures} failed, {c.started} open, {c.waiting} waiting
      {c.refused ? `, ${c.refused} refused` : ""}{c.cancelled ? `, ${c.cancelled} cancelled` : ""}
    </span>
  );
}

function targetsText(r: FleetRun): string {
  const t = r.targets;
  if (!t) {
    return "—";
  }
  if (t.all) {
    return "all nodes";
  }
  return [
    t.nodeIds.length ? `nodes ${t.nodeIds.join(", ")}` : "",
    t.pool ? `pool ${t.pool}` : "",
    t.selector ? `labels ${t.selector}` : "",
    t.conditions.length ? `conditions ${t.conditions.join(", ")}` : "",
  ].filter(Boolean).join("; ");
}

export function RunsTable({ items, id, empty }: { items: FleetRun[]; id: string; empty: string }): JSX.Element {
  return (
    <table id={id}>
      <thead><tr>{["Run", "Kind", "State", "Progress", "Targets", "Requested by", "Created"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
      <tbody>
        {items.length === 0 ? <tr class="empty"><td colSpan={7} class="muted">{empty}</td></tr> : items.map((r) => (
          <tr key={r.id} data-run={r.id} data-state={r.state} {...rowKeys(`#/runs/${r.id}`)}>
            <td><a href={`#/runs/${r.id}`} tabIndex={-1}>{r.id}</a></td><td>{r.kind}</td>
            <td><State s={r.state} />{r.waitingReason ? <span class="muted"> waiting: {r.waitingReason}</span> : null}</td>
            <td><Progress r={r} /></td><td>{targetsText(r)}</td><td>{r.requester}</td><td><Ago t={r.createdAt} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function RunsPage(): JSX.Element {
  const [items, setItems] = useState<FleetRun[]>();
  const [err, setErr] = useState<unknown>();
  const load = () => api().fleetRuns.list({ tenantId: tenant(), limit: 50 }).then((r) => setItems(r.items), setErr);
  const live = useFollow({ tenantId: tenant(), types: [...fleetRunEventTypes] }, () => void load(), () => void load(), []);
  return (
    <section>
      <h1>Fleet runs <LiveBadge live={live} /></h1>
      <p><a href="#/runs/new" id="new-run">New fleet run…</a></p>
      <ErrorLine err={err} />
      {items === undefined ? <Muted>loading…</Muted> : <RunsTable id="runs" items={items} empty="no fleet runs yet" />}
    </section>
  );
}

export function NewRunPage(): JSX.Element {
  const [kinds, setKinds] = useState<Kind[]>();
  const [kindName, setKindName] = useState("");
  const [payload, setPayload] = useState<Record<string, Json>>({});
  const [problems, setProblems] = useState<string[]>([]);
  const [err, setErr] = useState<unknown>();
  useEffect(() => {
    apiRunnableKinds().then(setKinds, setErr);
  }, []);
  const kind = kinds?.find((k) => k.name === kindName);
  const submit = async (e: Event) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget as HTMLFormElement);
    const text = (k: string) => String(f.get(k) ?? "").trim();
    const list = (k: string) => text(k).split(/[\s,]+/).filter(Boolean);
    if (!kind) {
      setProblems(["choose a kind"]);
      return;
    }
    const bad = checkPayload(kind, payload);
    setProblems(bad);
    setErr(undefined);
    if (bad.length > 0) {
      return;
    }
    try {
      const r = await api().fleetRuns.create({
        tenantId: tenant(), kind: kind.name, payload, reason: text("reason"),
        targets: { nodeIds: list("nodeIds"), pool: text("pool"), selector: text("selector"), conditions: list("conditions"), all: f.get("all") === "on" },
        maxConcurrency: text("maxConcurrency"), maxErrors: text("maxErrors"), idempotencyKey: newKey("run"),
      });
      location.hash = `#/runs/${r.id}`;
    } catch (x) {
      setErr(x);
    }
  };
  return (
    <section>
      <h1>New fleet run</h1>
      <form id="new-run-form" class="run-form" onSubmit={submit} noValidate>
        <label>Kind{" "}
          <select id="run-kind" value={kindName} onChange={(e) => { setKindName(e.currentTarget.value); setPayload({}); setProblems([]); }}>
            <option value="">—</option>
            {kinds?.map((k) => <option value={k.name} key={k.name}>{k.name}{k.flags?.destructive ? " (destructive)" : ""}</option>)}
          </select>
        </label>
        {kind ? <p class="muted">{kind.description}</p> : null}
        {kind ? destructiveNote(kind) : null}
        <fieldset>
          <legend>Targets (a node is a target when it matches every one given)</legend>
          <label>Node ids <input name="nodeIds" id="run-nodes" placeholder="node_a node_b" /></label>
          <label>Pool <input name="pool" id="run-pool" /></label>
          <label>Labels <input name="selector" id="run-selector" placeholder="gpu=h200" /></label>
          <label>Conditions <input name="conditions" id="run-conditions" placeholder="RowRemapPending" /></label>
          <label><input type="checkbox" name="all" id="run-all" /> all nodes (alone)</label>
        </fieldset>
        <label>Max concurrency <input name="maxConcurrency" id="run-concurrency" placeholder="10%" /></label>
        <label>Max errors <input name="maxErrors" id="run-errors" placeholder="0" /></label>
        <label>Reason <input name="reason" id="run-reason" placeholder="why (approvers read it)" /></label>
        {kind ? <SchemaForm kind={kind} onChange={setPayload} idPrefix="run-payload" key={kind.name} /> : null}
        <button type="submit" id="run-create">Create the run</button>
        {problems.length > 0 ? <ul class="error" id="payload-problems" role="alert">{problems.map((p) => <li key={p}>{p}</li>)}</ul> : null}
        {err ? <p class="error" id="run-error" role="alert">{errorText(err)}</p> : null}
      </form>
    </section>
  );
}

function TargetsTable({ items }: { items: FleetRunTarget[] }): JSX.Element {
  return (
    <table id="run-targets">
      <thead><tr>{["#", "Node", "State", "Command", "Reason", "Message", "Started", "Settled"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
      <tbody>
        {items.map((t) => (
          <tr key={t.nodeId} data-node={t.nodeId} data-state={t.state}>
            <td>{t.ordinal}</td><td><a href={`#/nodes/${t.nodeId}`}>{t.nodeId}</a></td>
            <td><State s={t.state} />{t.commandState && t.state === "started" ? <Muted> ({t.commandState})</Muted> : null}</td>
            <td>{t.commandId ? <a href={`#/nodes/${t.nodeId}/commands/${t.commandId}`}>{t.commandId}</a> : "—"}</td>
            <td>{t.reason}</td><td>{t.message}</td><td><Ago t={t.startedAt} /></td><td><Ago t={t.settledAt} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function RunPage({ runId }: { runId: string }): JSX.Element {
  const [r, setR] = useState<FleetRun>();
  const [targets, setTargets] = useState<FleetRunTarget[]>();
  const [err, setErr] = useState<unknown>();
  const load = () => {
    api().fleetRuns.get({ tenantId: tenant(), runId }).then(setR, setErr);
    api().fleetRuns.listTargets({ tenantId: tenant(), runId, limit: 200 }).then((x) => setTargets(x.items), setErr);
  };
  // The fleet.run.* events name no node: every watch of the tenant sees
  // them; this run's (by runId) read it again.
  const live = useFollow({ tenantId: tenant(), types: [...fleetRunEventTypes, "command.settled"] }, (e) => {
    if (e.data?.runId === runId || (e.type === "command.settled" && targets?.some((t) => t.commandId === e.data?.commandId))) {
      load();
    }
  }, load, [runId]);
  const act = (what: "pause" | "resume" | "cancel") => async () => {
    if (what === "cancel" && !confirm(`Cancel ${runId}? Nothing new starts, pending commands are cancelled and in-flight ones are asked to stop (what they already did is not undone).`)) {
      return;
    }
    try {
      setR(await api().fleetRuns[what]({ tenantId: tenant(), runId }));
    } catch (x) {
      setErr(x);
    }
  };
  return (
    <section>
      <h1>Fleet run {runId} <LiveBadge live={live} /></h1>
      <ErrorLine err={err} />
      {r ? (
        <div id="run" data-state={r.state}>
          <table class="fields">
            <tbody>
              <tr><th>Kind</th><td>{r.kind}</td></tr>
              <tr><th>State</th><td id="run-state"><State s={r.state} /> {r.stateReason ? `${r.stateReason}: ${r.stateMessage}` : ""}</td></tr>
              <tr><th>Progress</th><td><Progress r={r} /></td></tr>
              <tr><th>Waiting for</th><td id="run-waiting">{r.waitingReason ? `${r.waitingReason}: ${r.waitingMessage}` : "—"}</td></tr>
              <tr><th>Targets</th><td>{targetsText(r)}</td></tr>
              <tr><th>Limits</th><td>concurrency {r.maxConcurrency} ({r.concurrencyLimit} at once), errors {r.maxErrors} ({r.errorLimit} tolerated)</td></tr>
              <tr><th>Requested by</th><td>{r.requester} ({r.requestedVia}){r.reason ? `: ${r.reason}` : ""}</td></tr>
              <tr><th>Batch</th><td>{r.batchId ? <a href={`#/batches/${r.batchId}`}>{r.batchId}</a> : "—"}</td></tr>
              <tr><th>Created / finished</th><td><Ago t={r.createdAt} /> / <Ago t={r.finishedAt} /></td></tr>
            </tbody>
          </table>
          {fleetRunEnded(r) ? null : (
            <p class="run-actions">
              {r.state === "paused" ? <button type="button" id="run-resume" onClick={act("resume")}>Resume</button> : <button type="button" id="run-pause" onClick={act("pause")}>Pause</button>}{" "}
              <button type="button" class="danger" id="run-cancel" onClick={act("cancel")}>Cancel the run…</button>
            </p>
          )}
        </div>
      ) : null}
      <h2>Nodes</h2>
      {targets === undefined ? <Muted>loading…</Muted> : <TargetsTable items={targets} />}
    </section>
  );
}
