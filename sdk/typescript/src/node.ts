// createClient for Node: Connect over HTTP/1.1 (bc-server's httpListen) with
// @connectrpc/connect-node.
import { createConnectTransport } from "@connectrpc/connect-node";

import { bearer, createClientOn } from "./client.js";
import type { BetterComputeClient, ClientOptions } from "./client.js";

export * from "./index.js";

/** createClient({ baseUrl, token }) returns { commands, commandBatches, events, fleet, fleetRuns, kinds, nodes, pools, reconciler }. */
export function createClient(options: ClientOptions): BetterComputeClient {
  return createClientOn(
    createConnectTransport({
      baseUrl: options.baseUrl,
      httpVersion: "1.1",
      useBinaryFormat: true,
      interceptors: [bearer(options.token)],
    }),
  );
}
