package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers set on dead-lettered messages.
const (
	HeaderDLQSubject   = "Atoll-Dlq-Subject"
	HeaderDLQStream    = "Atoll-Dlq-Stream"
	HeaderDLQSequence  = "Atoll-Dlq-Sequence"
	HeaderDLQDelivered = "Atoll-Dlq-Delivered"
	HeaderDLQError     = "Atoll-Dlq-Error"
)

// ErrPermanent marks a handler error that retrying cannot fix; the message
// goes to the dead-letter path at once. Wrap it: fmt.Errorf("...: %w", bus.ErrPermanent).
var ErrPermanent = errors.New("permanent failure")

// Handler processes one message. Returning nil acks it; an error asks for a
// redelivery after the consumer's backoff, or dead-letters it once the
// deliveries are exhausted. Handlers must be idempotent.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// ConsumerSpec describes a durable pull consumer.
type ConsumerSpec struct {
	// Stream is the stream consumed.
	Stream string
	// Durable is the consumer's durable name, shared by all replicas of a service.
	Durable string
	// FilterSubjects narrows the stream's subjects (all when empty).
	FilterSubjects []string
	// AckWait is how long a delivery may stay unacknowledged before the
	// server redelivers it (default 30s). Long handlers send InProgress.
	AckWait time.Duration
	// MaxDeliver bounds deliveries; the last failure goes to the dead-letter
	// subject (default 5).
	MaxDeliver int
	// Backoff is the delay before redelivery after a failure, indexed by
	// delivery count (the last entry repeats). Each delay is jittered by ±20%.
	// Default: 1s, 5s, 30s.
	Backoff []time.Duration
	// DeliverNew starts a new consumer at new messages instead of the stream start.
	DeliverNew bool
	// MaxAckPending bounds messages in flight (default 1000).
	MaxAckPending int
	// Logger receives handler failures; slog.Default() when nil.
	Logger *slog.Logger
}

func (s *ConsumerSpec) defaults() {
	if s.AckWait == 0 {
		s.AckWait = 30 * time.Second
	}
	if s.MaxDeliver == 0 {
		s.MaxDeliver = 5
	}
	if len(s.Backoff) == 0 {
		s.Backoff = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}
	}
	if s.MaxAckPending == 0 {
		s.MaxAckPending = 1000
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
}

// backoff returns the jittered delay after the given (1-based) delivery.
func (s *ConsumerSpec) backoff(delivered uint64) time.Duration {
	i := int(delivered) - 1
	if i >= len(s.Backoff) {
		i = len(s.Backoff) - 1
	}
	if i < 0 {
		i = 0
	}
	return Jitter(s.Backoff[i], 0.2)
}

// Jitter spreads d uniformly over d*(1±frac).
func Jitter(d time.Duration, frac float64) time.Duration {
	if d <= 0 || frac <= 0 {
		return d
	}
	f := 1 + frac*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}

// Consumption is a running consumer; Stop ends it.
type Consumption struct {
	cc        jetstream.ConsumeContext
	unlinkCtx func() bool
}

// Stop stops fetching; handlers in flight finish.
func (c *Consumption) Stop() {
	c.unlinkCtx()
	c.cc.Stop()
}

// Consume creates or updates the durable consumer and runs handler on each
// message until Stop or ctx is done.
func (b *Bus) Consume(ctx context.Context, spec ConsumerSpec, handler Handler) (*Consumption, error) {
	spec.defaults()
	cfg := jetstream.ConsumerConfig{
		Durable:        spec.Durable,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        spec.AckWait,
		MaxDeliver:     spec.MaxDeliver,
		FilterSubjects: spec.FilterSubjects,
		MaxAckPending:  spec.MaxAckPending,
	}
	if spec.DeliverNew {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", spec.Durable, spec.Stream, err)
	}
	log := spec.Logger.With("stream", spec.Stream, "consumer", spec.Durable)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		b.handle(ctx, &spec, log, handler, msg)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		log.Debug("consume error", "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", spec.Durable, err)
	}
	return &Consumption{cc: cc, unlinkCtx: context.AfterFunc(ctx, cc.Stop)}, nil
}

func (b *Bus) handle(ctx context.Context, spec *ConsumerSpec, log *slog.Logger, handler Handler, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		log.Error("message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	herr := handler(ctx, msg)
	if herr == nil {
		if err := msg.Ack(); err != nil {
			log.Warn("ack", "subject", msg.Subject(), "err", err)
		}
		return
	}
	if ctx.Err() != nil {
		// Shutting down: let the server redeliver to another replica.
		_ = msg.Nak()
		return
	}
	if errors.Is(herr, ErrPermanent) || int(meta.NumDelivered) >= spec.MaxDeliver {
		if err := b.deadLetter(ctx, spec, msg, meta, herr); err != nil {
			// Could not park it: leave it for AckWait redelivery rather than lose it.
			log.Error("dead-letter", "subject", msg.Subject(), "err", err)
			return
		}
		log.Warn("message dead-lettered", "subject", msg.Subject(), "delivered", meta.NumDelivered, "err", herr)
		_ = msg.Term()
		return
	}
	delay := spec.backoff(meta.NumDelivered)
	log.Info("handler failed, redelivering", "subject", msg.Subject(), "delivered", meta.NumDelivered, "delay", delay, "err", herr)
	_ = msg.NakWithDelay(delay)
}

func (b *Bus) deadLetter(ctx context.Context, spec *ConsumerSpec, msg jetstream.Msg, meta *jetstream.MsgMetadata, cause error) error {
	hdr := nats.Header{}
	for k, v := range msg.Headers() {
		if k == jetstream.MsgIDHeader {
			continue
		}
		hdr[k] = v
	}
	hdr.Set(HeaderDLQSubject, msg.Subject())
	hdr.Set(HeaderDLQStream, meta.Stream)
	hdr.Set(HeaderDLQSequence, strconv.FormatUint(meta.Sequence.Stream, 10))
	hdr.Set(HeaderDLQDelivered, strconv.FormatUint(meta.NumDelivered, 10))
	hdr.Set(HeaderDLQError, cause.Error())
	id := fmt.Sprintf("dlq:%s:%s:%d", meta.Stream, spec.Durable, meta.Sequence.Stream)
	_, err := b.Publish(ctx, DeadLetterSubject(meta.Stream, spec.Durable), id, msg.Data(), hdr)
	return err
}
