package main

import "testing"

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]memoryLimit{
		"": {auto: true}, "auto": {auto: true}, "off": {}, "0": {},
		"512Mi": {bytes: 512 << 20}, "1G": {bytes: 1e9},
	} {
		if got, err := parseMemoryLimit(in); err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1Gi", "1Mi", "lots", "12 cores"} {
		if got, err := parseMemoryLimit(bad); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %+v, want an error", bad, got)
		}
	}
}

// The auto limit gives each connected device its budget, and never sits
// below what is live (the collector would then run without end).
func TestAutoLimit(t *testing.T) {
	if got := autoLimit(0, 8<<20); got != autoBase {
		t.Errorf("no devices, 8 MiB live: %d, want the base %d", got, autoBase)
	}
	if got, want := autoLimit(3000, 70<<20), int64(autoBase+3000*autoPerDevice); got != want {
		t.Errorf("3,000 devices, 70 MiB live: %d, want %d", got, want)
	}
	if got, want := autoLimit(1000, 400<<20), int64(400<<20)/8*9; got != want {
		t.Errorf("1,000 devices, 400 MiB live (a heavier fleet than the budget): %d, want 9/8 of live %d", got, want)
	}
	if live := liveBytes(); live == 0 {
		t.Error("liveBytes read nothing")
	}
}
