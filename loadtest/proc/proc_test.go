package proc

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeakRSS: VmHWM of /proc/<pid>/status, read by procfs, in bytes; none is an error; and a
// live process's, reset and read back.
func TestPeakRSS(t *testing.T) {
	status := func(text string) procfs.Proc {
		dir := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(dir, "4242"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "4242", "status"), []byte(text), 0o644))
		fs, err := procfs.NewFS(dir)
		require.NoError(t, err)
		p, err := fs.Proc(4242)
		require.NoError(t, err)
		return p
	}
	n, err := peakRSS(status("Name:\tseckill\nVmPeak:\t 2000 kB\nVmHWM:\t    51200 kB\nVmRSS:\t 40000 kB\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(50<<20), n)
	_, err = peakRSS(status("Name:\tseckill\n"))
	assert.Error(t, err)

	p := Peaks{PIDs: []int{os.Getpid()}}
	p.Begin()
	mb, err := p.Highest()
	require.NoError(t, err)
	assert.Positive(t, mb)
}

// TestStartExitLine: a process that exits at start — a service whose database refused it — is
// reported in one line with its own last words: its log goes away with the run's folder.
func TestStartExitLine(t *testing.T) {
	dir := t.TempDir()
	script := dir + "/seckill"
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho 'seckill configuration:'\necho 'seckill: open mysql: Error 1040: Too many connections' >&2\nexit 1\n"), 0o755))
	_, err := Start(context.Background(), script, nil, dir+"/instance-0.log")
	require.Error(t, err)
	assert.Equal(t, "seckill exited at start (exit status 1): seckill: open mysql: Error 1040: Too many connections", err.Error())
}
