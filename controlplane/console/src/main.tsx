// The web console: the fleet in a browser, on the TypeScript client
// (@better-compute/client's web entry, connect-web) and Preact. It holds a
// bearer token in the tab's sessionStorage and never an approver key: a
// batch awaiting approval shows the `better-compute batch approve` line to
// run where the key is. Live views follow events.watch; nothing polls.
import { render } from "preact";
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";

import { ApiError, createClient } from "../../../sdk/typescript/src/web.js";
import type { FleetSummary } from "../../../sdk/typescript/src/web.js";
import { BatchPage, BatchesPage } from "./batches.js";
import { CommandPage } from "./command.js";
import { api, clearSession, currentSession, errorText, parseHash, saveSession } from "./core.js";
import type { Route } from "./core.js";
import { KindPage, KindsPage } from "./kinds.js";
import { NodePage } from "./node.js";
import { NodesPage } from "./nodes.js";
import { OverviewPage } from "./overview.js";
import { NewRunPage, RunPage, RunsPage } from "./runs.js";

function SignIn({ onSignedIn }: { onSignedIn: () => void }): JSX.Element {
  const [token, setToken] = useState("");
  const [tenantId, setTenantId] = useState("");
  const [err, setErr] = useState("");
  const submit = async (e: Event) => {
    e.preventDefault();
    const s = { token: token.trim(), tenantId: tenantId.trim() };
    const c = createClient({ baseUrl: location.origin, token: s.token });
    try {
      // Any call proves the token; batches need compute:batches:read,
      // which a reader may lack: only UNAUTHENTICATED is a wrong token.
      await c.commandBatches.list({ tenantId: s.tenantId, limit: 1 });
    } catch (x) {
      if (x instanceof ApiError && (x.code === "UNAUTHENTICATED" || x.code === "NOT_FOUND")) {
        setErr(errorText(x));
        return;
      }
    }
    saveSession(s, c);
    location.hash = "#/overview";
    onSignedIn();
  };
  return (
    <form id="signin" onSubmit={submit}>
      <h1>better-compute console</h1>
      <p>Sign in with an API bearer token (bc-server's auth). It stays in this tab only.</p>
      <label>Token <input id="token" type="password" autocomplete="off" placeholder="bearer token" value={token} onInput={(e) => setToken(e.currentTarget.value)} /></label>
      <label>Tenant <input id="tenant" placeholder="tenant_…" value={tenantId} onInput={(e) => setTenantId(e.currentTarget.value)} /></label>
      <button type="submit">Sign in</button>
      <p class="error" id="signin-error">{err}</p>
    </form>
  );
}

/**
 * The warning every page shows while fleet.summary says the control plane
 * does not sign commands.
 */
function SigningWarning({ summary }: { summary: FleetSummary | undefined }): JSX.Element | null {
  if (!summary || summary.commandSigning) {
    return null;
  }
  return (
    <div class="warning" id="signing-warning" role="alert">
      <b>Commands go unsigned.</b> This control plane has no <code>pki.commandSigning</code>: it signs no command or node spec, so a
      node without trust anchors runs whatever its gateway hands it. Create a signing root (<code>better-compute pki create-root</code>), set{" "}
      <code>pki.commandSigning</code> in bc-server's configuration and give the nodes the root as their trust anchor: see docs/trust.md.
    </div>
  );
}

function Nav({ onSignOut }: { onSignOut: () => void }): JSX.Element {
  return (
    <nav>
      <a href="#/overview">Overview</a>
      <a href="#/nodes">Nodes</a>
      <a href="#/runs">Fleet runs</a>
      <a href="#/batches">Batches</a>
      <a href="#/kinds">Kinds</a>
      <span class="muted">tenant {currentSession()!.tenantId}</span>
      <button type="button" onClick={onSignOut}>Sign out</button>
    </nav>
  );
}

function Page({ route }: { route: Route }): JSX.Element {
  const [a, b, c, d] = route.parts;
  if (a === "nodes" && b && c === "commands" && d) {
    return <CommandPage nodeId={b} commandId={d} key={`${b}/${d}`} />;
  }
  if (a === "nodes" && b) {
    return <NodePage nodeId={b} key={b} />;
  }
  if (a === "nodes") {
    return <NodesPage query={route.query} />;
  }
  if (a === "runs" && b === "new") {
    return <NewRunPage />;
  }
  if (a === "runs" && b) {
    return <RunPage runId={b} key={b} />;
  }
  if (a === "runs") {
    return <RunsPage />;
  }
  if (a === "batches" && b) {
    return <BatchPage batchId={b} key={b} />;
  }
  if (a === "batches") {
    return <BatchesPage />;
  }
  if (a === "kinds" && b) {
    return <KindPage name={b} version={c ?? ""} key={`${b}@${c ?? ""}`} />;
  }
  if (a === "kinds") {
    return <KindsPage />;
  }
  return <OverviewPage />;
}

function App(): JSX.Element {
  const [hash, setHash] = useState(location.hash);
  const [signedIn, setSignedIn] = useState(currentSession() !== undefined);
  const [summary, setSummary] = useState<FleetSummary>();
  useEffect(() => {
    const on = () => {
      setHash(location.hash);
      setSignedIn(currentSession() !== undefined);
      document.querySelector("dialog[open]")?.remove();
    };
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  // Whether the control plane signs commands, for the warning on every page.
  useEffect(() => {
    const s = currentSession();
    if (!s) {
      return;
    }
    api().fleet.summary({ tenantId: s.tenantId }).then(setSummary, () => setSummary(undefined));
  }, [signedIn]);
  if (!signedIn) {
    return <SignIn onSignedIn={() => setSignedIn(true)} />;
  }
  const signOut = () => {
    clearSession();
    setSummary(undefined);
    setSignedIn(false);
    location.hash = "#/";
  };
  return (
    <>
      <Nav onSignOut={signOut} />
      <SigningWarning summary={summary} />
      <Page route={parseHash(hash)} />
    </>
  );
}

render(<App />, document.getElementById("main")!);
