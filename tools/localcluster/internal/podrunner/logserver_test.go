package podrunner

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestSeekToLastLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]string{0: "", 1: "c\n", 2: "b\nc\n", 9: "a\nb\nc\n"} {
		f, _ := os.Open(path)
		if err := seekToLastLines(f, n); err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != want {
			t.Errorf("last %d lines: %q, want %q", n, got, want)
		}
	}
}
