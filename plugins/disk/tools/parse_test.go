package tools

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func recording(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

func TestParseNVMeIDCtrl_ReadsIdentityAndEraseCapabilities(t *testing.T) {
	c, err := ParseNVMeIDCtrl(recording(t, "nvme-id-ctrl-pm9a3.json"))
	require.NoError(t, err)
	require.Equal(t, NVMeController{Model: "SAMSUNG MZQL23T8HCLS-00A07", Serial: "S64GNE0R801234", Firmware: "GDC5602Q",
		FormatSupported: true, CryptoEraseFormat: true, SanitizeCrypto: true, SanitizeBlock: true}, c)
	c, err = ParseNVMeIDCtrl(recording(t, "nvme-id-ctrl-nocrypto.json"))
	require.NoError(t, err)
	require.True(t, c.FormatSupported)
	require.False(t, c.CryptoEraseFormat || c.SanitizeCrypto || c.SanitizeBlock || c.SanitizeOverwrite)
	_, err = ParseNVMeIDCtrl([]byte(`{"sn":"x"}`))
	require.ErrorIs(t, err, ErrMalformed)
	require.Contains(t, err.Error(), "missing sn, mn, oacs or fna")
}

func TestParseNVMeIDNs_ReadsEUI64AndDropsAllZeroIDs(t *testing.T) {
	ns, err := ParseNVMeIDNs(recording(t, "nvme-id-ns-pm9a3.json"))
	require.NoError(t, err)
	require.Equal(t, NVMeNamespace{EUI64: "0025384581b0a1c2", NGUID: "36344730528012340025384500000001", SizeBlocks: 7501476528}, ns)
	ns, err = ParseNVMeIDNs([]byte(`{"nsze":1,"eui64":"0000000000000000","nguid":"00000000000000000000000000000000"}`))
	require.NoError(t, err)
	require.Empty(t, ns.EUI64)
	require.Empty(t, ns.NGUID)
}

// Both shapes nvme-cli prints: 2.x nests under the device with sstat an
// object; 1.x prints the raw SSTAT.
func TestParseNVMeSanitizeLog_BothShapes(t *testing.T) {
	for file, want := range map[string]NVMeSanitizeLog{
		"nvme-sanitize-log-idle.json":      {Status: SanitizeNever, Progress: 65535},
		"nvme-sanitize-log-running.json":   {Status: SanitizeInProgress, Progress: 21845},
		"nvme-sanitize-log-done.json":      {Status: SanitizeSucceeded, GlobalErased: true, Progress: 65535},
		"nvme-sanitize-log-failed-v1.json": {Status: SanitizeFailed, Progress: 65535},
	} {
		got, err := ParseNVMeSanitizeLog(recording(t, file))
		require.NoError(t, err, file)
		require.Equal(t, want, got, file)
	}
	got, err := ParseNVMeSanitizeLog([]byte(`{"sprog":65535,"sstat":257}`))
	require.NoError(t, err)
	require.Equal(t, NVMeSanitizeLog{Status: 1, GlobalErased: true, Progress: 65535}, got)
	for _, bad := range []string{`[]`, `{}`, `{"a":{},"b":{}}`, `{"nvme0":{"sstat":{"status":"done"}}}`, `{"sstat":"x"}`} {
		_, err := ParseNVMeSanitizeLog([]byte(bad))
		require.ErrorIs(t, err, ErrMalformed, bad)
	}
}

func TestParseHdparmI_ReadsTheSecurityStateMachine(t *testing.T) {
	d, err := ParseHdparmI(recording(t, "hdparm-I-frozen.txt"))
	require.NoError(t, err)
	require.Equal(t, "Samsung SSD 860 EVO 500GB", d.Model)
	require.Equal(t, "S3Z2NB0K812345A", d.Serial)
	require.Equal(t, "RVT04B6Q", d.Firmware)
	require.Equal(t, "5002538e40a1b2c3", d.WWN)
	require.Equal(t, ATASecurity{Supported: true, Frozen: true, EnhancedErase: true, EraseTime: "2min", EnhancedEraseTime: "8min"}, d.Security)
	d, err = ParseHdparmI(recording(t, "hdparm-I-locked.txt"))
	require.NoError(t, err)
	require.True(t, d.Security.Enabled && d.Security.Locked && !d.Security.Frozen)
	// A drive that does not say whether it is frozen is never guessed at.
	_, err = ParseHdparmI([]byte("/dev/sda:\n\tModel Number: X\nSecurity:\n\t\tsupported\n\tnot\tenabled\n\tnot\tlocked\n"))
	require.ErrorIs(t, err, ErrMalformed)
	require.Contains(t, err.Error(), "whether the drive is frozen")
}

func FuzzParseNVMeIDCtrl(f *testing.F) {
	f.Add(recording(f, "nvme-id-ctrl-pm9a3.json"))
	f.Add(recording(f, "nvme-id-ctrl-nocrypto.json"))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = ParseNVMeIDCtrl(b) })
}

func FuzzParseNVMeIDNs(f *testing.F) {
	f.Add(recording(f, "nvme-id-ns-pm9a3.json"))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = ParseNVMeIDNs(b) })
}

func FuzzParseNVMeSanitizeLog(f *testing.F) {
	for _, n := range []string{"nvme-sanitize-log-idle.json", "nvme-sanitize-log-done.json", "nvme-sanitize-log-failed-v1.json"} {
		f.Add(recording(f, n))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseNVMeSanitizeLog(b)
		if err == nil && (l.Status < 0 || l.Status > 7) {
			t.Fatalf("status %d outside SSTAT's three bits", l.Status)
		}
	})
}

func FuzzParseHdparmI(f *testing.F) {
	for _, n := range []string{"hdparm-I-frozen.txt", "hdparm-I-ready.txt", "hdparm-I-locked.txt"} {
		f.Add(recording(f, n))
	}
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = ParseHdparmI(b) })
}

func TestParseSg(t *testing.T) {
	d, err := ParseSgInq(recording(t, "sg_inq-st4000nm0025.txt"))
	require.NoError(t, err)
	require.Equal(t, SCSIDrive{Vendor: "SEAGATE", Product: "ST4000NM0025", Revision: "N004", Serial: "ZC1234560000C7260ABC"}, d)
	_, err = ParseSgInq([]byte("nothing"))
	require.ErrorIs(t, err, ErrMalformed)
	k, err := SenseKey(recording(t, "sg_requests-clean.txt"))
	require.NoError(t, err)
	require.Equal(t, "No Sense", k)
	require.True(t, SanitizeCompleted(recording(t, "sg_sanitize-crypto-done.txt")))
	require.False(t, SanitizeCompleted(recording(t, "sg_sanitize-crypto-illegal.txt")))
}

func FuzzParseSgInq(f *testing.F) {
	f.Add(recording(f, "sg_inq-st4000nm0025.txt"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseSgInq(b)
		_, _ = SenseKey(b)
	})
}
