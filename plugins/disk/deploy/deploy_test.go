package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"

	"github.com/better-compute/commands/plugins/disk/internal/loopdev"
)

const (
	diskSize  = 32 << 20
	imageSize = 8 << 20
)

// rawImage is a disk image: a DOS partition table with one Linux
// partition, then 1 MiB of random data (incompressible, so that cutting
// the compressed file cuts into the image), then zeros.
func rawImage(t *testing.T) []byte {
	img := make([]byte, imageSize)
	_, _ = rand.Read(img[512 : 1<<20])
	e := img[446:462]
	e[4] = 0x83
	binary.LittleEndian.PutUint32(e[8:], 2048)
	binary.LittleEndian.PutUint32(e[12:], imageSize/512-2048)
	img[510], img[511] = 0x55, 0xaa
	return img
}

func xzOf(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	require.NoError(t, err)
	_, err = w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func zstdOf(t testing.TB, b []byte) []byte {
	w, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	return w.EncodeAll(b, nil)
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func serve(t testing.TB, body []byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }))
	t.Cleanup(srv.Close)
	return srv.URL + "/images/node.raw?X-Amz-Signature=secret"
}

func readDev(t *testing.T, dev string, n int) []byte {
	f, err := os.Open(dev)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0))
	b := make([]byte, n)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	return b
}

func deployErr(t *testing.T, err error, reason string) *Error {
	t.Helper()
	require.Error(t, err)
	var de *Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, reason, de.Reason, err.Error())
	return de
}

// "deploy of an xz image verified by readback": decompressed while
// streaming, hashed, the partition table re-read (the kernel now sees the
// image's partition), the medium read back.
func TestDeploy_XZImageToALoopDeviceVerifiedByReadback(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{PartScan: true})
	img := rawImage(t)
	file := xzOf(t, img)
	res, err := Run(context.Background(), Deps{}, Request{URL: serve(t, file), Device: dev, SHA256: sum(file)})
	require.NoError(t, err)
	require.True(t, res.Verified)
	require.Equal(t, "xz", res.Compression)
	require.EqualValues(t, len(file), res.Downloaded)
	require.Equal(t, sum(file), res.ImageSHA256)
	require.EqualValues(t, imageSize, res.Written)
	require.Equal(t, sum(img), res.WriteSHA256)
	require.Equal(t, sum(img), res.Readback)
	require.Equal(t, "ok", res.Partitions)
	require.NotContains(t, res.Source, "secret", "a presigned URL's signature is never recorded")
	require.True(t, bytes.Equal(img, readDev(t, dev, imageSize)), "the disk holds the image")
}

func TestDeploy_ZstdAndUncompressedImages(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	img := rawImage(t)
	for comp, file := range map[string][]byte{"zstd": zstdOf(t, img), "none": img} {
		res, err := Run(context.Background(), Deps{}, Request{URL: serve(t, file), Device: dev, SHA256: sum(file)})
		require.NoError(t, err, comp)
		require.Equal(t, comp, res.Compression)
		require.True(t, res.Verified)
		require.Equal(t, sum(img), res.Readback)
		require.True(t, bytes.Equal(img, readDev(t, dev, imageSize)))
	}
}

// "refuses a wrong digest": the partial image's head is zeroed again.
func TestDeploy_RefusesAWrongDigest(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	img := rawImage(t)
	file := xzOf(t, img)
	_, err := Run(context.Background(), Deps{}, Request{URL: serve(t, file), Device: dev, SHA256: sum([]byte("another image"))})
	de := deployErr(t, err, ReasonDigestMismatch)
	require.Contains(t, de.Error(), "the image served has SHA-256 "+sum(file))
	require.Contains(t, de.Error(), "zeroed again")
	require.True(t, bytes.Equal(make([]byte, 1<<20), readDev(t, dev, 1<<20)), "no partition table of an image nobody vouched for is left")
}

// "refuses ... a truncated image (a real upstream tool accepts truncated
// images: be better)": a body shorter than its Content-Length, and an xz
// file that was itself cut short, even when the digest given is the cut
// file's own.
func TestDeploy_RefusesATruncatedImage(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	img := rawImage(t)
	file := xzOf(t, img)
	short := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(file)))
		_, _ = w.Write(file[:len(file)/2])
	}))
	defer short.Close()
	_, err := Run(context.Background(), Deps{}, Request{URL: short.URL, Device: dev, SHA256: sum(file)})
	deployErr(t, err, ReasonTruncated)

	cut := file[:len(file)*3/4]
	_, err = Run(context.Background(), Deps{}, Request{URL: serve(t, cut), Device: dev, SHA256: sum(cut)})
	deployErr(t, err, ReasonTruncated)
	zcut := zstdOf(t, img)
	zcut = zcut[:len(zcut)*3/4]
	_, err = Run(context.Background(), Deps{}, Request{URL: serve(t, zcut), Device: dev, SHA256: sum(zcut)})
	deployErr(t, err, ReasonTruncated)
	require.True(t, bytes.Equal(make([]byte, 1<<20), readDev(t, dev, 1<<20)))
}

func TestDeploy_RefusesAnImageLargerThanTheDiskAndBadRequests(t *testing.T) {
	dev := loopdev.New(t, 4<<20, loopdev.Options{})
	img := rawImage(t)
	_, err := Run(context.Background(), Deps{}, Request{URL: serve(t, img), Device: dev, SHA256: sum(img)})
	deployErr(t, err, ReasonTooLarge)
	_, err = Run(context.Background(), Deps{}, Request{URL: "ftp://x/y", Device: dev, SHA256: sum(img)})
	require.Contains(t, deployErr(t, err, ReasonBadRequest).Error(), "must be an http or https URL")
	_, err = Run(context.Background(), Deps{}, Request{URL: "http://x/y", Device: dev, SHA256: "abc"})
	require.Contains(t, deployErr(t, err, ReasonBadRequest).Error(), "must be 64 hex digits")
}

func TestDeploy_RefusesAMountedDevice(t *testing.T) {
	dev := loopdev.New(t, diskSize, loopdev.Options{})
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", dev)
	mnt := t.TempDir()
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Skipf("cannot mount a loop device here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, 0) })
	img := rawImage(t)
	_, err := Run(context.Background(), Deps{}, Request{URL: serve(t, img), Device: dev, SHA256: sum(img)})
	require.Contains(t, deployErr(t, err, ReasonRefused).Error(), "is mounted")
}
