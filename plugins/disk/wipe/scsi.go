package wipe

import (
	"context"
	"time"

	"github.com/better-compute/commands/plugins/disk/tools"
)

// scsiSanitize runs SANITIZE on a SCSI/SAS drive through sg3_utils: a
// crypto erase where the drive accepts one, else a block erase (a drive
// that supports neither answers Illegal Request, which is reported). The
// tool is run without --early, so it waits for the drive itself; the
// drive must then report no pending sense (sg_requests: No Sense).
func (w *wiper) scsiSanitize(ctx context.Context) error {
	w.version(ctx, "sg_sanitize")
	out, err := w.tool(ctx, 30*time.Second, "sg_inq", w.req.Device)
	if err != nil {
		return err
	}
	d, err := tools.ParseSgInq(out)
	if err != nil {
		return &Error{Reason: ReasonToolFailed, Err: err}
	}
	w.res.SCSI = &d
	if w.res.Device.Model == "" {
		w.res.Device.Model = d.Vendor + " " + d.Product
	}
	if w.res.Device.Serial == "" {
		w.res.Device.Serial = d.Serial
	}
	var last error
	for _, action := range []string{"--crypto", "--block"} {
		out, err = w.tool(ctx, 24*time.Hour, "sg_sanitize", "--quick", action, w.req.Device)
		if err == nil {
			w.res.Method.Parameters["action"] = action[2:]
			break
		}
		last = err
	}
	if err != nil {
		return fail(ReasonUnsupported, "%s (%s) accepted neither a crypto nor a block erase SANITIZE (%v); use overwrite", w.req.Device, w.res.Device.Model, last)
	}
	if !tools.SanitizeCompleted(out) {
		return fail(ReasonUnconfirmed, "sg_sanitize did not report a completed sanitize")
	}
	out, err = w.tool(ctx, 30*time.Second, "sg_requests", w.req.Device)
	if err != nil {
		return err
	}
	key, err := tools.SenseKey(out)
	if err != nil {
		return &Error{Reason: ReasonToolFailed, Err: err}
	}
	w.res.PostState["senseKey"] = key
	if key != "No Sense" {
		return fail(ReasonUnconfirmed, "the drive reports sense key %q after the sanitize", key)
	}
	return nil
}
