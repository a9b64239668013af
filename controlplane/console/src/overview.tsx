// The fleet overview, the page after sign-in: fleet.summary's counts (each
// a link to the node list filtered to those nodes), the commands that
// failed in the last hour, the fleet runs in progress, the batches awaiting
// approval and the reconciler's plan with what each remediation waits for.
// It reads everything again (at most once a second) as events arrive.
import type { JSX } from "preact";
import { useRef, useState } from "preact/hooks";

import type { Batch, Command, FleetRun, FleetSummary, Remediation } from "../../../sdk/typescript/src/web.js";
import { approveLine } from "./batches.js";
import { CommandsTable } from "./commands.js";
import { Ago, ErrorLine, LiveBadge, Muted, State, api, href, tenant, useFollow } from "./core.js";
import { RunsTable } from "./runs.js";

function Count({ n, label, to, id }: { n: bigint | number; label: string; to: string; id: string }): JSX.Element {
  return (
    <a class="count" href={to} id={id} data-count={String(n)}>
      <b>{String(n)}</b> {label}
    </a>
  );
}

function Counts({ s }: { s: FleetSummary }): JSX.Element {
  return (
    <div id="summary">
      <div class="counts">
        <Count id="count-nodes" n={s.nodes} label="nodes" to={href("nodes")} />
        <Count id="count-connected" n={s.connected} label="connected" to={href("nodes", { connected: "true" })} />
        <Count id="count-disconnected" n={s.nodes - s.connected} label="not connected" to={href("nodes", { connected: "false" })} />
        <Count id="count-healthy" n={s.healthy} label="healthy" to={href("nodes", { health: "healthy" })} />
        <Count id="count-unhealthy" n={s.unhealthy} label="unhealthy" to={href("nodes", { health: "unhealthy" })} />
      </div>
      <div class="breakdowns">
        <div>
          <h3>By condition (True)</h3>
          {s.byCondition.length === 0 ? <Muted>no node reports a condition</Muted> : (
            <ul id="by-condition">{s.byCondition.map((c) => <li key={c.name}><a href={href("nodes", { condition: c.name })} data-condition={c.name}>{c.name}: {String(c.nodes)}</a></li>)}</ul>
          )}
        </div>
        <div>
          <h3>By failed check (latest diag.nvml)</h3>
          {s.byFailedCheck.length === 0 ? <Muted>no node failed a check</Muted> : (
            <ul id="by-failed-check">{s.byFailedCheck.map((c) => <li key={c.name}><a href={href("nodes", { failedCheck: c.name })} data-check={c.name}>{c.name}: {String(c.nodes)}</a></li>)}</ul>
          )}
        </div>
        <div>
          <h3>Pools</h3>
          <table id="pools">
            <thead><tr><th>Pool</th><th>Nodes</th><th>Connected</th><th>Unhealthy</th></tr></thead>
            <tbody>
              {s.pools.length === 0 ? <tr class="empty"><td colSpan={4} class="muted">no pools</td></tr> : s.pools.map((p) => (
                <tr key={p.pool} data-pool={p.pool}>
                  <td><a href={href("nodes", { pool: p.pool })}>{p.pool}</a></td>
                  <td><a href={href("nodes", { pool: p.pool })}>{String(p.nodes)}</a></td>
                  <td><a href={href("nodes", { pool: p.pool, connected: "true" })}>{String(p.connected)}</a></td>
                  <td><a href={href("nodes", { pool: p.pool, health: "unhealthy" })}>{String(p.unhealthy)}</a></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </div>
      <p class="muted">As of <Ago t={s.asOf} />; approver quorum {s.approvalThreshold === 0 ? "none (batches are audit-only)" : `${s.approvalThreshold}`}.</p>
    </div>
  );
}

function Plan({ items }: { items: Remediation[] }): JSX.Element {
  return (
    <table id="plan">
      <thead><tr>{["Node", "Action", "Trigger", "State", "Waits for", "Batch", "Since"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
      <tbody>
        {items.length === 0 ? <tr class="empty"><td colSpan={7} class="muted">the reconciler plans nothing</td></tr> : items.map((r) => (
          <tr key={r.id} data-remediation={r.id} data-state={r.state}>
            <td><a href={`#/nodes/${r.nodeId}`}>{r.nodeId}</a> <Muted>({r.pool})</Muted></td>
            <td>{r.action}{r.gpu ? ` ${r.gpu}` : ""} <Muted>by {r.owner}</Muted></td>
            <td title={r.triggerMessage}>{r.trigger}</td>
            <td><State s={r.state} /></td>
            <td class="waiting">{r.waitingReason ? <span><b>{r.waitingReason}</b>{r.waitingMessage ? `: ${r.waitingMessage}` : ""}</span> : <Muted>—</Muted>}</td>
            <td>{r.batchId ? <a href={`#/batches/${r.batchId}`}>{r.batchId}</a> : "—"}</td>
            <td><Ago t={r.createdAt} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

const failedStates = ["failed", "rejected", "expired"];

export function OverviewPage(): JSX.Element {
  const [summary, setSummary] = useState<FleetSummary>();
  const [failed, setFailed] = useState<Command[]>();
  const [runs, setRuns] = useState<FleetRun[]>();
  const [batches, setBatches] = useState<Batch[]>();
  const [plan, setPlan] = useState<Remediation[]>();
  const [errs, setErrs] = useState<Record<string, unknown>>({});
  const fail = (what: string) => (err: unknown) => setErrs((e) => ({ ...e, [what]: err }));
  const load = () => {
    const t = tenant();
    api().fleet.summary({ tenantId: t }).then(setSummary, fail("summary"));
    const hourAgo = Date.now() - 3600_000;
    const settledSince = { seconds: BigInt(Math.floor(hourAgo / 1000)), nanos: 0 };
    Promise.all(failedStates.map((state) => api().commands.list({ tenantId: t, state, settledSince, limit: 20 }))).then((pages) => {
      const all = pages.flatMap((p) => p.items);
      all.sort((a, b) => Number((b.settledAt?.seconds ?? 0n) - (a.settledAt?.seconds ?? 0n)));
      setFailed(all.slice(0, 20));
    }, fail("failed"));
    api().fleetRuns.list({ tenantId: t, state: "active", limit: 20 }).then((r) => setRuns(r.items), fail("runs"));
    api().commandBatches.list({ tenantId: t, state: "awaiting-approval", limit: 20 }).then((r) => setBatches(r.items), fail("batches"));
    api().reconciler.plan({ tenantId: t }).then((r) => setPlan(r.items), fail("plan"));
  };
  // Many events may come at once (a fleet run's wave): one read a second.
  const pending = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  const live = useFollow({ tenantId: tenant() }, () => {
    pending.current ??= setTimeout(() => {
      pending.current = undefined;
      load();
    }, 1000);
  }, load, []);
  return (
    <section>
      <h1>Fleet overview <LiveBadge live={live} /></h1>
      <ErrorLine err={errs.summary} />
      {summary ? <Counts s={summary} /> : <Muted>loading…</Muted>}
      <h2>Commands that failed in the last hour {summary ? <Muted>({String(summary.failedLastHour)})</Muted> : null}</h2>
      <ErrorLine err={errs.failed} />
      {failed ? <CommandsTable id="failed-commands" items={failed} showNode empty="no command failed in the last hour" /> : null}
      <h2>Fleet runs in progress</h2>
      <ErrorLine err={errs.runs} />
      {runs ? <RunsTable id="active-runs" items={runs} empty="no fleet run in progress" /> : null}
      <h2>Batches awaiting approval</h2>
      <ErrorLine err={errs.batches} />
      {batches ? (batches.length === 0 ? <p class="muted empty" id="awaiting-none">no batch awaits approval</p> : (
        <ul id="awaiting">
          {batches.map((b) => (
            <li key={b.batchId} data-batch={b.batchId}>
              <a href={`#/batches/${b.batchId}`}>{b.batchId}</a> {b.reason} — {b.approvalsNeeded} more approval(s); <code>{approveLine(b)}</code>
            </li>
          ))}
        </ul>
      )) : null}
      <h2>The reconciler's plan</h2>
      <ErrorLine err={errs.plan} />
      {plan ? <Plan items={plan} /> : null}
    </section>
  );
}
