package bus

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
)

// Large values. The NATS server refuses a message over its max_payload
// (1 MiB by default), and a Key-Value value is one message. A value that
// grows with the fleet (the upgrade service's progress of a plan, about
// 320 bytes of JSON a node) is written through Compress, which gzips it
// once it passes CompressOver; whoever reads such a key passes the value
// through Inflate, which returns a value that was not compressed as it is
// (JSON never starts with gzip's magic bytes), so values written before
// and after stay readable.

// CompressOver is the size above which Compress gzips a value.
const CompressOver = 64 << 10

// MaxInflated bounds what Inflate returns.
const MaxInflated = 64 << 20

// gzipMagic starts every gzip stream.
var gzipMagic = []byte{0x1f, 0x8b}

// Compress returns b gzipped when it is larger than CompressOver, b
// itself otherwise.
func Compress(b []byte) ([]byte, error) {
	if len(b) <= CompressOver {
		return b, nil
	}
	var out bytes.Buffer
	out.Grow(len(b) / 4)
	zw, err := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	return out.Bytes(), nil
}

// Inflate returns the value Compress was given: b ungzipped when it is a
// gzip stream, b itself otherwise.
func Inflate(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, gzipMagic) {
		return b, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, MaxInflated+1))
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	if len(out) > MaxInflated {
		return nil, fmt.Errorf("inflate: value over %d bytes", MaxInflated)
	}
	return out, nil
}
