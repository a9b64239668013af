// Batches: each with its scope, requester, deadline and approvals; for one
// awaiting approval the exact `better-compute batch approve` line to run
// where an approver key is (the console never holds one); an audit-only
// batch (no approver keys: threshold 0) says it needs no approval. A
// batch's page lists its commands (commands.list with batchId).
import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { Batch, Command } from "../../../sdk/typescript/src/web.js";
import { CommandsTable, mergeCommand } from "./commands.js";
import { Ago, ErrorLine, LiveBadge, Muted, State, api, tenant, useFollow } from "./core.js";

/** The approve line an approver runs where their key is. */
export function approveLine(b: Batch): string {
  return `better-compute batch approve --tenant ${b.tenantId} --batch ${b.batchId} --key approver.pem`;
}

function Approvals({ b }: { b: Batch }): JSX.Element {
  if (b.threshold === 0) {
    return (
      <p class="audit-only" data-audit-only="true">
        Audit only: this control plane has no approver keys, so the batch needs no approval. It was recorded and approved at once, and
        its commands run at once, without waiting for anyone.
      </p>
    );
  }
  return (
    <div>
      <p>Approvals ({b.approvals.length} of {b.threshold}):{b.approvals.length === 0 ? " none yet" : ""}</p>
      {b.approvals.length ? (
        <ul class="approvals">{b.approvals.map((a) => <li key={a.keyId}>{a.approver} (key {a.keyId.slice(0, 12)}…) <Ago t={a.approvedAt} /></li>)}</ul>
      ) : null}
      {b.state === "awaiting-approval" ? (
        <div class="approve">
          <p>{b.approvalsNeeded} more approval(s) needed (threshold {b.threshold}). An approver runs, where their key is (the console never holds one):</p>
          <pre class="approve-line">{approveLine(b)}</pre>
        </div>
      ) : null}
    </div>
  );
}

export function BatchCard({ b, link = true }: { b: Batch; link?: boolean }): JSX.Element {
  return (
    <section class="batch" data-batch={b.batchId} data-state={b.state}>
      <h2>{link ? <a href={`#/batches/${b.batchId}`}>{b.batchId}</a> : b.batchId} <State s={b.state} /></h2>
      <p>{b.reason}</p>
      <p class="muted">requested by {b.requester} <Ago t={b.createdAt} />, deadline <Ago t={b.deadline} /></p>
      <table>
        <thead><tr><th>Subject</th><th>Kind</th><th>Payload</th></tr></thead>
        <tbody>
          {b.scope.map((l, i) => (
            <tr key={i}><td><a href={`#/nodes/${l.subject}`}>{l.subject}</a></td><td>{l.kind}</td><td>{l.payloadSha256 ? `sha256 ${l.payloadSha256.slice(0, 12)}…` : "any"}</td></tr>
          ))}
        </tbody>
      </table>
      <Approvals b={b} />
      {link ? <p><a href={`#/batches/${b.batchId}`} class="batch-commands">its commands →</a></p> : null}
    </section>
  );
}

export function BatchesPage(): JSX.Element {
  const [items, setItems] = useState<Batch[]>();
  const [err, setErr] = useState<unknown>();
  const load = () => api().commandBatches.list({ tenantId: tenant(), limit: 50 }).then((r) => setItems(r.items), setErr);
  // A batch's approvals publish no event of their own; its commands' do.
  const live = useFollow({ tenantId: tenant(), types: ["command.settled", "node.command.queued"] }, () => void load(), () => void load(), []);
  return (
    <section>
      <h1>Batches <LiveBadge live={live} /></h1>
      <ErrorLine err={err} />
      <div id="batches">
        {items === undefined ? <Muted>loading…</Muted> : items.length === 0 ? <p class="muted empty">no batches</p> : items.map((b) => <BatchCard b={b} key={b.batchId} />)}
      </div>
    </section>
  );
}

const newestFirst = (a: Command, b: Command) => Number((b.createdAt?.seconds ?? 0n) - (a.createdAt?.seconds ?? 0n)) || (a.id < b.id ? 1 : -1);

export function BatchPage({ batchId }: { batchId: string }): JSX.Element {
  const [b, setB] = useState<Batch>();
  const [commands, setCommands] = useState<Command[]>();
  const [err, setErr] = useState<unknown>();
  const load = () => {
    api().commandBatches.get({ tenantId: tenant(), batchId }).then(setB, setErr);
    api().commands.list({ tenantId: tenant(), batchId, limit: 200 }).then((r) => setCommands(r.items), setErr);
  };
  const live = useFollow({ tenantId: tenant() }, (e) => {
    if (e.data?.batchId === batchId || (typeof e.data?.commandId === "string" && commands?.some((c) => c.id === e.data?.commandId))) {
      void load();
    } else if (e.type === "node.command.queued" && typeof e.data?.commandId === "string") {
      // A new command may be in the batch: read it.
      api().commands.get({ tenantId: tenant(), commandId: e.data.commandId as string }).then((c) => {
        if (c.batchId === batchId) {
          setCommands((old) => mergeCommand(old ?? [], c, newestFirst));
        }
      }, () => undefined);
    }
  }, load, [batchId]);
  return (
    <section>
      <h1>Batch {batchId} <LiveBadge live={live} /></h1>
      <ErrorLine err={err} />
      {b ? <BatchCard b={b} link={false} /> : null}
      <h2>Its commands</h2>
      {commands === undefined ? <Muted>loading…</Muted> : (
        <CommandsTable id="batch-commands" items={commands} showNode empty="no command has been queued in this batch yet" />
      )}
    </section>
  );
}
