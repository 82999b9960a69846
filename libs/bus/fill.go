package bus

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// StreamFill is a Prometheus collector of how full streams are, read from
// the servers at each scrape (one stream info request per stream):
//
//	atoll_stream_bytes{stream}       gauge: bytes stored
//	atoll_stream_max_bytes{stream}   gauge: the stream's MaxBytes (absent when unlimited)
//	atoll_stream_fill_ratio{stream}  gauge: bytes / max bytes; alert above FillAlertRatio
//
// A bucket's stream is KV_<bucket>. A stream that does not answer within
// the scrape's budget is left out of that scrape (and logged).
type StreamFill struct {
	b       *Bus
	streams []string
	timeout time.Duration
	log     *slog.Logger

	bytes, max, ratio *prometheus.Desc
}

// StreamFill returns the collector of the named streams' fill; register
// it on the service's registry.
func (b *Bus) StreamFill(streams ...string) *StreamFill {
	return &StreamFill{
		b: b, streams: slices.Clone(streams), timeout: 5 * time.Second, log: b.log,
		bytes: prometheus.NewDesc("atoll_stream_bytes", "Bytes a JetStream stream (a bucket's: KV_<bucket>) stores.", []string{"stream"}, nil),
		max:   prometheus.NewDesc("atoll_stream_max_bytes", "A stream's size limit (MaxBytes); absent when it has none.", []string{"stream"}, nil),
		ratio: prometheus.NewDesc("atoll_stream_fill_ratio", "Bytes stored over MaxBytes: a full bucket refuses writes, a full stream drops its oldest messages. Alert above 0.8.", []string{"stream"}, nil),
	}
}

// OwnStreams lists the streams whose fill user's service reports: those
// its grant reads or writes (buckets, followed streams) and those it
// emits to. The admin and a user without a grant report every stream.
func OwnStreams(user string) []string {
	t := DefaultTopology(1)
	g, ok := Grants()[user]
	if !ok {
		var all []string
		for _, s := range t.Streams {
			all = append(all, s.Name)
		}
		for _, k := range t.Buckets {
			all = append(all, kvStream(k.Bucket))
		}
		return all
	}
	out := g.Streams()
	for _, s := range t.Streams {
		if slices.ContainsFunc(g.Emits, func(subject string) bool { return streamHolds(s, subject) }) {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// streamHolds reports whether subject, a subject or a pattern ending in
// ">", falls in one of s's subjects (each a root followed by ".>").
func streamHolds(s jetstream.StreamConfig, subject string) bool {
	for _, pattern := range s.Subjects {
		if strings.HasPrefix(subject, strings.TrimSuffix(pattern, ">")) {
			return true
		}
	}
	return false
}

// Describe implements prometheus.Collector.
func (f *StreamFill) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.bytes
	ch <- f.max
	ch <- f.ratio
}

// Collect implements prometheus.Collector.
func (f *StreamFill) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	for _, name := range f.streams {
		s, err := f.b.Stream(ctx, name)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(ctx)
		}
		if err != nil {
			f.log.Warn("stream fill", "stream", name, "err", err)
			continue
		}
		used := float64(info.State.Bytes)
		ch <- prometheus.MustNewConstMetric(f.bytes, prometheus.GaugeValue, used, name)
		if limit := info.Config.MaxBytes; limit > 0 {
			ch <- prometheus.MustNewConstMetric(f.max, prometheus.GaugeValue, float64(limit), name)
			ch <- prometheus.MustNewConstMetric(f.ratio, prometheus.GaugeValue, used/float64(limit), name)
		}
	}
}
