// One command: what holds it back (blockedBy, kept once it ended), its
// fields (cancel requested, who requested it, progress, what it waits for),
// diag.nvml's check table, the payload and result, the signatures, and for
// a logs.collect its support bundle, downloaded with the tab's token from
// bc-server's bundle endpoint and saved through a blob URL.
import type { JSX } from "preact";
import { useState } from "preact/hooks";

import { jsonOf } from "../../../sdk/typescript/src/web.js";
import type { Command } from "../../../sdk/typescript/src/web.js";
import { BlockedBy } from "./blocked.js";
import { CancelButton, CommandState, progressText, requesterText } from "./commands.js";
import { Ago, ErrorLine, LiveBadge, State, api, currentSession, errorText, tenant, terminal, useFollow } from "./core.js";
import { kindHref } from "./kinds.js";

interface Check {
  check: string;
  gpu?: { index: number; uuid?: string; busId: string };
  status: string;
  reason: string;
  action?: string;
}

function CheckTable({ result }: { result: unknown }): JSX.Element {
  const checks = (result as { checks?: Check[] } | undefined)?.checks;
  if (!Array.isArray(checks)) {
    return <p>no checks in the result</p>;
  }
  // Failing checks first (in the order they ran), then the rest.
  const sorted = [...checks].sort((a, b) => Number(b.status === "fail") - Number(a.status === "fail"));
  return (
    <table id="checks">
      <thead><tr>{["Check", "GPU", "Status", "Why", "What to do"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
      <tbody>
        {sorted.map((c, i) => (
          <tr key={i} data-check={c.check} data-status={c.status}>
            <td>{c.check}</td><td>{c.gpu ? `${c.gpu.index} (${c.gpu.busId})` : "all"}</td><td><State s={c.status} /></td><td>{c.reason}</td><td>{c.action ?? ""}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function hex(b: Uint8Array): string {
  return [...b.slice(0, 8)].map((x) => x.toString(16).padStart(2, "0")).join("");
}

/** The support bundle's download: a fetch with the bearer token (a link cannot carry it), saved from a blob URL. */
function BundleDownload({ c }: { c: Command }): JSX.Element {
  const [state, setState] = useState("");
  const download = async () => {
    setState("downloading…");
    const s = currentSession()!;
    const url = `/v1/tenants/${encodeURIComponent(s.tenantId)}/nodes/${encodeURIComponent(c.nodeId)}/commands/${encodeURIComponent(c.id)}/bundle`;
    try {
      const r = await fetch(url, { headers: { Authorization: `Bearer ${s.token}` } });
      if (!r.ok) {
        const body = await r.text();
        let msg = body;
        try {
          const j = JSON.parse(body) as { message?: string; code?: string };
          msg = [j.code, j.message].filter(Boolean).join(": ") || body;
        } catch {
          // not JSON: the text as it came
        }
        setState(`download failed: HTTP ${r.status} ${msg}`);
        return;
      }
      const blob = await r.blob();
      const name = /filename="?([^";]+)"?/.exec(r.headers.get("Content-Disposition") ?? "")?.[1] ?? `${c.nodeId}-${c.id}.tar.gz`;
      const a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = name;
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
      setState(`saved ${name} (${blob.size} bytes)`);
    } catch (err) {
      setState(`download failed: ${errorText(err)}`);
    }
  };
  return (
    <span>
      <button type="button" id="bundle-download" onClick={download}>Download the support bundle</button> <span id="bundle-state">{state}</span>
    </span>
  );
}

export function CommandPage({ nodeId, commandId }: { nodeId: string; commandId: string }): JSX.Element {
  const [c, setC] = useState<Command>();
  const [err, setErr] = useState<unknown>();
  const load = () => api().commands.get({ tenantId: tenant(), nodeId, commandId }).then((x) => { setC(x); setErr(undefined); }, setErr);
  // The watch opens before the first read, so a settle between the two is
  // not missed.
  const live = useFollow({ tenantId: tenant(), nodeId }, (e) => {
    if (e.data?.commandId === commandId) {
      void load();
    }
  }, () => void load(), [nodeId, commandId]);
  const row = (k: string, ...v: (JSX.Element | string | null)[]) => <tr><th>{k}</th><td>{v}</td></tr>;
  let body: JSX.Element | null = null;
  if (c) {
    const signature = c.signed ? `signed at enqueue (command digest ${c.commandSha256.slice(0, 16)}…)` : "not signed (the server has no pki.commandSigning)";
    const attestation = c.nodeSig.length > 0
      ? `attested: the node signed its result (signature ${hex(c.nodeSig)}…, result digest ${c.resultSha256.slice(0, 16)}…); check it with: better-compute commands verify ${c.id} nodeId=${nodeId}`
      : terminal.has(c.state) ? "no node signature on this result" : "no result yet";
    const bundle = c.kind === "logs.collect"
      ? (c.state === "succeeded" && c.bundleKey ? <BundleDownload c={c} /> : <span class="muted">{terminal.has(c.state) ? "no bundle: the command did not succeed" : "once the command succeeds"}</span>)
      : null;
    body = (
      <div>
        <BlockedBy c={c} />
        <table class="fields" id="command">
          <tbody>
            {row("Kind", <a href={kindHref(c.kind, c.kindVersion)}>{c.kind}</a>, c.kindVersion ? ` v${c.kindVersion}` : "")}
            {row("State", <span id="command-state"><CommandState c={c} /></span>, " ", <CancelButton c={c} onDone={(x, e) => (x ? setC(x) : setErr(e))} />)}
            {row("Reason", c.reason || "—")}
            {row("Message", c.message || "—")}
            {c.waitingReason || c.waitingMessage ? row(terminal.has(c.state) ? "Waited for" : "Waiting for",
              <span id="waiting"><code>{c.waitingReason}</code> {c.blockedBy?.reason ? "(what blocks it, and the fix, are above)" : c.waitingMessage}</span>) : null}
            {row("Progress", <span id="progress">{progressText(c) || "—"}</span>)}
            {row("Requested by", <span id="requester">{requesterText(c)}</span>, c.runId ? <span> — <a href={`#/runs/${c.runId}`}>{c.runId}</a></span> : null)}
            {row("Queued", <Ago t={c.createdAt} />)}
            {row("Expires (not after)", <Ago t={c.notAfter} />)}
            {row("Cancel requested", c.cancelRequestedAt ? <Ago t={c.cancelRequestedAt} /> : "—")}
            {row("Settled", <Ago t={c.settledAt} />)}
            {row("Batch", c.batchId ? <a href={`#/batches/${c.batchId}`}>{c.batchId}</a> : "—", c.awaitingApproval ? " (awaiting approval)" : "")}
            {bundle ? row("Support bundle", bundle) : null}
            {row("Signature", <span id="signature">{signature}</span>)}
            {row("Attestation", <span id="attestation">{attestation}</span>)}
          </tbody>
        </table>
        {c.kind === "diag.nvml" && c.result ? <><h2>Checks</h2><CheckTable result={jsonOf(c.result)} /></> : null}
        <h2>Payload</h2>
        <pre>{JSON.stringify(c.payload ?? {}, null, 2)}</pre>
        <h2>Result</h2>
        <pre id="result">{c.result === undefined ? "—" : JSON.stringify(jsonOf(c.result), null, 2)}</pre>
      </div>
    );
  }
  return (
    <section>
      <h1><a href={`#/nodes/${nodeId}`}>{nodeId}</a> / {commandId} <LiveBadge live={live} /></h1>
      <ErrorLine err={err} />
      {body}
    </section>
  );
}
