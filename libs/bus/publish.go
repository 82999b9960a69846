package bus

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publish stores data on subject in JetStream with msgID as Nats-Msg-Id, so
// a retried publish within the stream's duplicate window is stored once.
// The returned ack says whether the server saw it as a duplicate.
func (b *Bus) Publish(ctx context.Context, subject, msgID string, data []byte, hdr nats.Header) (*jetstream.PubAck, error) {
	msg := &nats.Msg{Subject: subject, Data: data, Header: hdr}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	ack, err := b.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	return ack, nil
}

// MsgID builds the idempotency key of a state change: the key and the
// revision that produced it.
func MsgID(key string, revision uint64) string {
	return key + "@" + strconv.FormatUint(revision, 10)
}

// ParseMsgID splits an idempotency key built by MsgID; ok is false for
// anything else.
func ParseMsgID(id string) (key string, revision uint64, ok bool) {
	i := strings.LastIndexByte(id, '@')
	if i < 0 {
		return "", 0, false
	}
	rev, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id[:i], rev, true
}
