package deploy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/disk/internal/loopdev"
)

// benchDeploy measures a deploy of file (img compressed) from a local HTTP
// server to a loop device (digest, decompression, write, sync, readback)
// beside its floor in the same run: fetching the same file and writing the
// already-decompressed image to the device with io.Copy and a sync, no
// digest, no readback. The ratio is what deploy's work costs over moving
// the bytes.
func benchDeploy(b *testing.B, compress func(testing.TB, []byte) []byte) {
	dev := loopdev.New(b, diskSize, loopdev.Options{})
	img := make([]byte, imageSize)
	copy(img, bytes.Repeat([]byte("bc-bench-image "), imageSize/15))
	file := compress(b, img)
	url := serve(b, file)
	floor := func() {
		resp, err := http.Get(url)
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		f, err := os.OpenFile(dev, os.O_WRONLY, 0)
		require.NoError(b, err)
		_, err = io.Copy(f, bytes.NewReader(img))
		require.NoError(b, err)
		require.NoError(b, f.Sync())
		f.Close()
	}
	var floorD, deployD time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		floor()
		floorD += time.Since(start)
		start = time.Now()
		_, err := Run(context.Background(), Deps{}, Request{URL: url, Device: dev, SHA256: sum(file)})
		deployD += time.Since(start)
		require.NoError(b, err)
	}
	per := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(per(deployD), "deploy-ms/op")
	b.ReportMetric(per(floorD), "floor-ms/op")
	b.ReportMetric(float64(deployD)/float64(floorD), "ratio")
	b.ReportMetric(float64(imageSize)/1e6/(deployD.Seconds()/float64(b.N)), "deploy-MB/s")
}

func BenchmarkDeploy_XZ(b *testing.B)   { benchDeploy(b, xzOf) }
func BenchmarkDeploy_Zstd(b *testing.B) { benchDeploy(b, zstdOf) }
