package bundles_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/better-compute/commands/controlplane/commands/bundles"
)

func p50(d []time.Duration) float64 {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[len(d)/2].Nanoseconds())
}

// BenchmarkDirUpload measures a 1 MiB presigned PUT through the dir store's
// handler on a real HTTP server, beside a floor measured in the same run:
// writing, syncing and renaming the same bytes into place, the least any
// store that leaves nothing partial must do.
func BenchmarkDirUpload(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	root := b.TempDir()
	mux := http.NewServeMux()
	srv := newServer(b, mux)
	store, err := bundles.NewDirStore(bundles.DirOptions{Root: root, BaseURL: srv + "/v1/blobs", Secret: bytes.Repeat([]byte("k"), 32)})
	if err != nil {
		b.Fatal(err)
	}
	mux.Handle(store.MountPath()+"/", store.Handler())
	p, err := store.PresignPut(context.Background(), "support-bundles/n/bench.bundle", time.Now().Add(time.Hour), 2<<20)
	if err != nil {
		b.Fatal(err)
	}
	floorDir := b.TempDir()
	var ups, floors []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPut, p.URL, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("upload: %v %v", err, resp)
		}
		resp.Body.Close()
		ups = append(ups, time.Since(start))

		start = time.Now()
		tmp := filepath.Join(floorDir, "tmp")
		f, _ := os.Create(tmp)
		_, _ = f.Write(body)
		_ = f.Sync()
		_ = f.Close()
		_ = os.Rename(tmp, filepath.Join(floorDir, "final"))
		floors = append(floors, time.Since(start))
	}
	b.StopTimer()
	up, floor := p50(ups), p50(floors)
	b.ReportMetric(up, "p50-ns")
	b.ReportMetric(floor, "floor-p50-ns")
	b.ReportMetric(up/floor, "ratio")
}

func newServer(b *testing.B, h http.Handler) string {
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv.URL
}
