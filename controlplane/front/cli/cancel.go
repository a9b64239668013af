package cli

import (
	"fmt"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// cancelNote says what `commands cancel` did, under its table: the row alone
// showed an in-flight command as `running` with nothing saying a cancel was
// requested, and a finished one as if the cancel had done something.
func cancelNote(c *apiv1.Command) string {
	switch c.GetState() {
	case "cancelled":
		return "cancelled: the command will not run (or ran no further)"
	case "succeeded", "failed", "rejected", "expired":
		when := ""
		if c.GetSettledAt() != nil {
			when = " at " + ts(c.GetSettledAt().AsTime())
		}
		return fmt.Sprintf("not cancelled: the command had already finished (%s%s); nothing to cancel", c.GetState(), when)
	}
	if c.GetCancelRequestedAt() != nil {
		return fmt.Sprintf("cancel requested at %s: the command is in flight (%s); the node is asked to stop it, and `commands get` or `commands watch` shows how it ends",
			ts(c.GetCancelRequestedAt().AsTime()), c.GetState())
	}
	return fmt.Sprintf("the command is %s and no cancel is recorded on it", c.GetState())
}
