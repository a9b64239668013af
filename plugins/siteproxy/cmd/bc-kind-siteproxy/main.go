// Command bc-kind-siteproxy is the site.httpProxy plugin that a site
// agent's bcd starts. BCD_SITE_INVENTORY (bcd's pluginEnv) names the site
// inventory.
package main

import (
	"os"

	"github.com/better-compute/commands/plugins/internal/site"
	"github.com/better-compute/commands/plugins/siteproxy"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	kind.Serve(siteproxy.New(os.Getenv(site.EnvInventory), kind.NewLogger()).Kind())
}
