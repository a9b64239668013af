// Commands as tables and the pieces their rows and pages share: the
// progress (never a negative or missing percent), who requested a command,
// and the cancel with its confirmation, which says what a cancel can and
// cannot undo.
import { render } from "preact";
import type { JSX } from "preact";
import { useState } from "preact/hooks";

import { jsonOf } from "../../../sdk/typescript/src/web.js";
import type { Command } from "../../../sdk/typescript/src/web.js";
import { Ago, Muted, State, api, rowKeys, tenant, terminal } from "./core.js";

export const cancelWarning =
  "A pending command is cancelled at once and never runs. A command already sent to the node (dispatched, acked or running) " +
  "is only asked to stop: the node stops between actions and reports what really happened, so anything it already did " +
  "(a reboot begun, a GPU reset, logs uploaded) is NOT undone. A command that has ended cannot be cancelled.";

/** Asks in a modal dialog whether to cancel c; resolves true to go ahead. */
export function confirmCancel(c: Command): Promise<boolean> {
  return new Promise((resolve) => {
    const host = document.createElement("div");
    document.body.append(host);
    const done = (v: boolean) => {
      render(null, host);
      host.remove();
      resolve(v);
    };
    render(
      <dialog id="cancel-dialog" ref={(d) => {
        if (d && !d.open) {
          d.showModal();
        }
      }} onCancel={() => done(false)}>
        <h2>Cancel {c.kind} {c.id}?</h2>
        <p>It is {c.state} now. {cancelWarning}</p>
        <button type="button" class="danger" onClick={() => done(true)}>Cancel the command</button>{" "}
        <button type="button" onClick={() => done(false)}>Keep it</button>
      </dialog>,
      host,
    );
  });
}

/** The node's last progress as "40% copying" ; "" when there is none to show. */
export function progressText(c: Command): string {
  const p = jsonOf(c.progress) as Record<string, unknown> | undefined;
  if (!p || typeof p !== "object" || terminal.has(c.state)) {
    return "";
  }
  // A negative percent means "unknown" to the node: show none.
  const pct = typeof p.percent === "number" && p.percent >= 0 ? `${Math.min(100, Math.round(p.percent))}%` : "";
  return [pct, typeof p.message === "string" ? p.message : ""].filter(Boolean).join(" ");
}

/**
 * requesterText says who asked for a command and how: "ops (api)",
 * "ops (fleet run run_…)", "provision (module:provision)"; the server
 * records it, never the caller.
 */
export function requesterText(c: { requester: string; requestedVia: string; runId: string }): string {
  if (!c.requester) {
    return "—";
  }
  if (c.requestedVia === "fleet-run" && c.runId) {
    return `${c.requester} (fleet run ${c.runId})`;
  }
  return c.requestedVia ? `${c.requester} (${c.requestedVia})` : c.requester;
}

/** The state, with "cancel requested" beside an in-flight state once a cancel was asked for. */
export function CommandState({ c }: { c: Command }): JSX.Element {
  return (
    <span>
      <State s={c.state} />
      {c.cancelRequestedAt && !terminal.has(c.state) ? <span class="cancel-requested" data-cancel-requested="true"> cancel requested <Ago t={c.cancelRequestedAt} /></span> : null}
    </span>
  );
}

/** A Cancel… button for a command not yet terminal; onDone runs after the call. */
export function CancelButton({ c, onDone }: { c: Command; onDone: (c: Command | undefined, err?: unknown) => void }): JSX.Element | null {
  const [busy, setBusy] = useState(false);
  if (terminal.has(c.state)) {
    return null;
  }
  const click = async () => {
    if (!(await confirmCancel(c))) {
      return;
    }
    setBusy(true);
    try {
      onDone(await api().commands.cancel({ tenantId: tenant(), nodeId: c.nodeId, commandId: c.id }));
    } catch (err) {
      onDone(undefined, err);
    } finally {
      setBusy(false);
    }
  };
  return <button type="button" class="cancel" disabled={busy} onClick={click}>{c.cancelRequestedAt ? "Cancel again…" : "Cancel…"}</button>;
}

/**
 * CommandsTable lists commands, with the node column when they are from
 * many nodes. Each row opens the command's page (a link, and Enter on the
 * row).
 */
export function CommandsTable({ items, id, showNode = false, empty, onChange }: {
  items: Command[];
  id: string;
  showNode?: boolean;
  empty: string;
  onChange?: (c: Command | undefined, err?: unknown) => void;
}): JSX.Element {
  const heads = [showNode ? "Node" : "Seq", "Kind", "State", "Reason", "Message", "Progress", "Requested by", "Queued", ""];
  return (
    <table id={id}>
      <thead><tr>{heads.map((x, i) => <th key={i}>{x}</th>)}</tr></thead>
      <tbody>
        {items.length === 0 ? <tr class="empty"><td colSpan={heads.length} class="muted">{empty}</td></tr> : items.map((c) => {
          const open = `#/nodes/${c.nodeId}/commands/${c.id}`;
          return (
            <tr key={c.id} data-command={c.id} data-state={c.state} {...rowKeys(open)}>
              <td>{showNode ? <a href={`#/nodes/${c.nodeId}`} tabIndex={-1}>{c.nodeId}</a> : String(c.seq)}</td>
              <td><a href={open} tabIndex={-1}>{c.kind}</a></td>
              <td><CommandState c={c} /></td>
              <td>{c.reason || c.waitingReason || ""}</td>
              <td class="message">{c.message || c.waitingMessage || (c.awaitingApproval ? `awaiting approval of ${c.batchId}` : "")}</td>
              <td class="progress">{progressText(c)}</td>
              <td class="requester">{requesterText(c)}</td>
              <td><Ago t={c.createdAt} /></td>
              <td>{onChange ? <CancelButton c={c} onDone={onChange} /> : <Muted> </Muted>}</td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

/** Keeps the newest read of each command: a read that raced a later one never puts an older state back. */
export function mergeCommand(list: Command[], c: Command, order: (a: Command, b: Command) => number): Command[] {
  const at = (x: Command) => Number(x.updatedAt?.seconds ?? 0n) * 1e9 + (x.updatedAt?.nanos ?? 0);
  const old = list.find((x) => x.id === c.id);
  if (old && at(old) > at(c)) {
    return list;
  }
  return [...list.filter((x) => x.id !== c.id), c].sort(order);
}
