// createClient for browsers: Connect over fetch with @connectrpc/connect-web.
import { createConnectTransport } from "@connectrpc/connect-web";

import { bearer, createClientOn } from "./client.js";
import type { BetterComputeClient, ClientOptions } from "./client.js";

export * from "./index.js";

/** createClient({ baseUrl, token }) returns { commands, commandBatches, events, fleet, fleetRuns, kinds, nodes, pools, reconciler }. */
export function createClient(options: ClientOptions): BetterComputeClient {
  return createClientOn(
    createConnectTransport({ baseUrl: options.baseUrl, useBinaryFormat: true, interceptors: [bearer(options.token)] }),
  );
}
