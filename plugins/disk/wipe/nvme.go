package wipe

import (
	"context"
	"fmt"
	"time"

	"github.com/better-compute/commands/plugins/disk/tools"
)

// nvmeIdentify reads the controller and namespace identity.
func (w *wiper) nvmeIdentify(ctx context.Context) (tools.NVMeController, error) {
	w.version(ctx, "nvme")
	out, err := w.tool(ctx, 30*time.Second, "nvme", "id-ctrl", "-o", "json", w.req.Device)
	if err != nil {
		return tools.NVMeController{}, err
	}
	ctrl, err := tools.ParseNVMeIDCtrl(out)
	if err != nil {
		return ctrl, &Error{Reason: ReasonToolFailed, Err: err}
	}
	out, err = w.tool(ctx, 30*time.Second, "nvme", "id-ns", "-o", "json", w.req.Device)
	if err != nil {
		return ctrl, err
	}
	ns, err := tools.ParseNVMeIDNs(out)
	if err != nil {
		return ctrl, &Error{Reason: ReasonToolFailed, Err: err}
	}
	w.res.NVMe = &NVMeIdentity{Controller: ctrl, Namespace: ns}
	if w.res.Device.Model == "" {
		w.res.Device.Model = ctrl.Model
	}
	if w.res.Device.Serial == "" {
		w.res.Device.Serial = ctrl.Serial
	}
	if w.res.Device.WWN == "" {
		w.res.Device.WWN = "eui." + ns.EUI64
		if ns.EUI64 == "" {
			w.res.Device.WWN = "eui." + ns.NGUID
		}
	}
	return ctrl, nil
}

// nvmeFormat runs Format NVM with a crypto erase (SES=2) where FNA says the
// drive can, otherwise a user-data erase (SES=1), as IPA does.
func (w *wiper) nvmeFormat(ctx context.Context) error {
	ctrl, err := w.nvmeIdentify(ctx)
	if err != nil {
		return err
	}
	if !ctrl.FormatSupported {
		return fail(ReasonUnsupported, "%s (%s) does not support Format NVM (OACS bit 1 clear); use overwrite", w.req.Device, ctrl.Model)
	}
	ses := 1
	if ctrl.CryptoEraseFormat {
		ses = 2
	}
	w.res.Method.Parameters["ses"] = ses
	w.res.Method.Parameters["cryptoErase"] = ses == 2
	if _, err := w.tool(ctx, 2*time.Hour, "nvme", "format", w.req.Device, fmt.Sprintf("--ses=%d", ses), "--force"); err != nil {
		return err
	}
	out, err := w.tool(ctx, 30*time.Second, "nvme", "id-ns", "-o", "json", w.req.Device)
	if err != nil {
		return err
	}
	ns, err := tools.ParseNVMeIDNs(out)
	if err != nil {
		return &Error{Reason: ReasonToolFailed, Err: err}
	}
	w.res.PostState["namespace"] = ns
	return nil
}

// nvmeSanitize runs a sanitize (crypto erase where SANICAP allows, else
// block erase) and waits for the sanitize log to say it succeeded with the
// global-data-erased bit set.
func (w *wiper) nvmeSanitize(ctx context.Context) error {
	ctrl, err := w.nvmeIdentify(ctx)
	if err != nil {
		return err
	}
	sanact, action := 0, ""
	switch {
	case ctrl.SanitizeCrypto:
		sanact, action = 4, "crypto-erase"
	case ctrl.SanitizeBlock:
		sanact, action = 2, "block-erase"
	default:
		return fail(ReasonUnsupported, "%s (%s) supports neither crypto nor block erase sanitize (SANICAP); use nvme-format or overwrite", w.req.Device, ctrl.Model)
	}
	w.res.Method.Parameters["sanact"] = sanact
	w.res.Method.Parameters["action"] = action
	log, err := w.sanitizeLog(ctx)
	if err != nil {
		return err
	}
	if log.Status == tools.SanitizeInProgress {
		return fail(ReasonRefused, "%s: a sanitize is already in progress (SPROG %d/65535)", w.req.Device, log.Progress)
	}
	if _, err := w.tool(ctx, time.Minute, "nvme", "sanitize", w.req.Device, fmt.Sprintf("--sanact=%d", sanact)); err != nil {
		return err
	}
	ticker := time.NewTicker(w.d.SanitizePoll)
	defer ticker.Stop()
	for {
		log, err = w.sanitizeLog(ctx)
		if err != nil {
			return err
		}
		w.res.PostState["sanitizeLog"] = log
		if log.Status != tools.SanitizeInProgress {
			break
		}
		w.d.Progress(log.Progress*100/65536, "sanitize in progress")
		select {
		case <-ctx.Done():
			// The drive goes on sanitizing whatever we do: say so.
			return &Error{Reason: ReasonUnconfirmed, Err: fmt.Errorf("stopped waiting while the drive still sanitizes (SPROG %d/65535): %w", log.Progress, ctx.Err())}
		case <-ticker.C:
		}
	}
	if log.Status != tools.SanitizeSucceeded && log.Status != tools.SanitizeSucceededN {
		return fail(ReasonUnconfirmed, "the sanitize log reports status %d, not a success", log.Status)
	}
	if !log.GlobalErased {
		return fail(ReasonUnconfirmed, "the sanitize log reports success without the global-data-erased bit (SSTAT bit 8)")
	}
	return nil
}

func (w *wiper) sanitizeLog(ctx context.Context) (tools.NVMeSanitizeLog, error) {
	out, err := w.tool(ctx, 30*time.Second, "nvme", "sanitize-log", "-o", "json", w.req.Device)
	if err != nil {
		return tools.NVMeSanitizeLog{}, err
	}
	log, err := tools.ParseNVMeSanitizeLog(out)
	if err != nil {
		return log, &Error{Reason: ReasonToolFailed, Err: err}
	}
	return log, nil
}
