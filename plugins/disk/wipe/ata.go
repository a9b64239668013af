package wipe

import (
	"context"
	"time"

	"github.com/better-compute/commands/plugins/disk/tools"
)

// ataPassword is the temporary user password the erase sets: ATA erases
// only a drive with security enabled. It is the word IPA uses, so a drive
// left locked by an interrupted erase (of ours or IPA's) can be unlocked.
const ataPassword = "NULL"

// ataErase runs the ATA security state machine: refuse a frozen drive,
// unlock a drive locked by an earlier interrupted erase, set the temporary
// password, erase (enhanced where supported), and require the drive to
// say "not enabled" afterwards.
func (w *wiper) ataErase(ctx context.Context) error {
	w.version(ctx, "hdparm")
	d, err := w.hdparmI(ctx)
	if err != nil {
		return err
	}
	switch {
	case !d.Security.Supported:
		return fail(ReasonUnsupported, "%s (%s) does not support the ATA security feature set; use overwrite", w.req.Device, d.Model)
	case d.Security.Frozen:
		return fail(ReasonFrozen, "%s (%s) is security-frozen (the firmware froze it at boot); suspend and resume the machine, or hot-plug the drive, then retry", w.req.Device, d.Model)
	}
	if d.Security.Locked {
		if _, err := w.tool(ctx, time.Minute, "hdparm", "--user-master", "u", "--security-unlock", ataPassword, w.req.Device); err != nil {
			return &Error{Reason: ReasonLocked, Err: err}
		}
		if d, err = w.hdparmI(ctx); err != nil {
			return err
		}
		if d.Security.Locked {
			return fail(ReasonLocked, "%s stays locked after an unlock with the erase's password: it holds another password", w.req.Device)
		}
	}
	if !d.Security.Enabled {
		if _, err := w.tool(ctx, time.Minute, "hdparm", "--user-master", "u", "--security-set-pass", ataPassword, w.req.Device); err != nil {
			return err
		}
		if d, err = w.hdparmI(ctx); err != nil {
			return err
		}
		if !d.Security.Enabled {
			return fail(ReasonUnconfirmed, "%s did not enable security after the password was set", w.req.Device)
		}
	}
	op := "--security-erase"
	if d.Security.EnhancedErase {
		op = "--security-erase-enhanced"
	}
	w.res.Method.Parameters["erase"] = op[2:]
	w.res.Method.Parameters["estimate"] = map[string]string{"erase": d.Security.EraseTime, "enhanced": d.Security.EnhancedEraseTime}
	if _, err := w.tool(ctx, 12*time.Hour, "hdparm", "--user-master", "u", op, ataPassword, w.req.Device); err != nil {
		return err
	}
	after, err := w.hdparmI(ctx)
	if err != nil {
		return err
	}
	w.res.PostState["ataSecurity"] = after.Security
	if after.Security.Enabled {
		return fail(ReasonUnconfirmed, "%s still reports security enabled after the erase (password %q is still set)", w.req.Device, ataPassword)
	}
	return nil
}

func (w *wiper) hdparmI(ctx context.Context) (tools.ATADrive, error) {
	out, err := w.tool(ctx, 30*time.Second, "hdparm", "-I", w.req.Device)
	if err != nil {
		return tools.ATADrive{}, err
	}
	d, err := tools.ParseHdparmI(out)
	if err != nil {
		return d, &Error{Reason: ReasonToolFailed, Err: err}
	}
	if w.res.ATA == nil {
		w.res.ATA = &d
		if w.res.Device.Model == "" {
			w.res.Device.Model = d.Model
		}
		if w.res.Device.Serial == "" {
			w.res.Device.Serial = d.Serial
		}
		if w.res.Device.WWN == "" && d.WWN != "" {
			w.res.Device.WWN = "naa." + d.WWN
		}
	}
	return d, nil
}
