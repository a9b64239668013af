package bmc

import (
	"context"
	"fmt"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// BootResult is bmc.boot's result.
type BootResult struct {
	BMC     string      `json:"bmc"`
	Machine string      `json:"machine,omitempty"`
	Wanted  BootSetting `json:"wanted"`
	Issued  string      `json:"issued,omitempty"`
	// Read is the boot override the last read showed.
	Read                *BootSetting     `json:"read,omitempty"`
	Verified            bool             `json:"verified"`
	VerifiedAfterMillis int64            `json:"verifiedAfterMillis,omitempty"`
	Refused             *NotAllowedError `json:"refused,omitempty"`
	Metadata
}

type bootPayload struct {
	BMC        string `json:"bmc"`
	Device     string `json:"device"`
	Persistent bool   `json:"persistent"`
	UEFI       *bool  `json:"uefi"`
}

func (p *Plugin) boot(ctx context.Context, req kind.Request) (any, error) {
	var pl bootPayload
	if err := req.Command.Decode(&pl); err != nil {
		return nil, kind.Fail(ReasonBadPayload, "%v", err)
	}
	b, cred, err := p.target(ctx, req, pl.BMC)
	if err != nil {
		return nil, err
	}
	want := BootSetting{Device: BootDevice(pl.Device), Persistent: pl.Persistent, UEFI: pl.UEFI == nil || *pl.UEFI}
	res := &BootResult{BMC: b.ID, Machine: b.Machine, Wanted: want}
	prov, md, closeProv, err := p.withProviders(ctx, b, cred, func(pctx context.Context, prov Provider) error {
		issued, err := prov.SetBoot(pctx, want)
		res.Issued = issued
		return err
	})
	defer closeProv()
	res.Metadata = md
	if err != nil {
		return p.providerFailure(res, &res.Refused, "boot "+pl.Device, b.ID, err)
	}
	start := time.Now()
	err = p.poll(ctx, func(ctx context.Context) (bool, error) {
		got, err := prov.Boot(ctx)
		if err != nil {
			return false, err
		}
		res.Read = &got
		return got == want, nil
	})
	if err != nil {
		return nil, &kind.Failure{Reason: ReasonUnverified, Result: res,
			Message: fmt.Sprintf("BMC %s (%s) last read the boot override as %+v, not %+v: %v", b.ID, md.SuccessfulProvider, res.Read, want, err)}
	}
	res.Verified, res.VerifiedAfterMillis = true, time.Since(start).Milliseconds()
	req.Logger.Info("boot override verified", "bmc", b.ID, "device", want.Device, "persistent", want.Persistent, "uefi", want.UEFI, "provider", md.SuccessfulProvider)
	return res, nil
}
