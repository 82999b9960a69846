package bus

import (
	"bytes"
	"fmt"
	"testing"
)

func TestCompressRoundTrips(t *testing.T) {
	var big bytes.Buffer
	big.WriteString(`{"nodes":{`)
	for i := range 5000 {
		fmt.Fprintf(&big, `"uid-%08d":{"name":"node-%d","state":"Done"},`, i, i)
	}
	big.WriteString(`"x":{}}}`)
	tests := []struct {
		name       string
		in         []byte
		compressed bool
	}{
		{"empty", nil, false},
		{"small JSON stays as it is", []byte(`{"a":1}`), false},
		{"at the threshold stays as it is", bytes.Repeat([]byte("a"), CompressOver), false},
		{"large JSON is gzipped", big.Bytes(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Compress(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.HasPrefix(c, gzipMagic); got != tt.compressed {
				t.Fatalf("compressed = %v, want %v", got, tt.compressed)
			}
			if tt.compressed && len(c) >= len(tt.in)/2 {
				t.Errorf("compressed to %d of %d bytes", len(c), len(tt.in))
			}
			out, err := Inflate(c)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, tt.in) {
				t.Errorf("round trip changed the value (%d bytes, want %d)", len(out), len(tt.in))
			}
		})
	}
	if _, err := Inflate(append([]byte{0x1f, 0x8b}, "not gzip"...)); err == nil {
		t.Error("a corrupt gzip stream inflated without an error")
	}
}
