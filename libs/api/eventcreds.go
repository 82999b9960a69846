package api

import "time"

// EventCredential is an events credential as the API shows it: never its
// secret, but once, when it is made (Password).
type EventCredential struct {
	// Project and Name name it (Name unique in the project).
	Project string `json:"project"`
	Name    string `json:"name"`
	// User is its NATS user name; Password, only in the answer that made
	// it, its secret.
	User     string `json:"user"`
	Password string `json:"password,omitempty"`
	// Creator made it, at Created; it stops working at Expires (never when
	// zero).
	Creator string     `json:"creator"`
	Created time.Time  `json:"created"`
	Expires *time.Time `json:"expires,omitempty"`
	// Stream and Consumer are its durable consumer (see Deliver), Subject the events it
	// may subscribe to, InboxPrefix the inboxes its connections must use.
	Stream      string `json:"stream"`
	Consumer    string `json:"consumer"`
	Subject     string `json:"subject"`
	InboxPrefix string `json:"inboxPrefix"`
	// Deliver is where the durable consumer pushes the project's events
	// while a connection of the credential subscribes there.
	Deliver string `json:"deliver"`
	// Servers are the NATS URLs to connect to (the gateway's --events-nats-url).
	Servers string `json:"servers,omitempty"`
}

// EventCredentialRequest makes an events credential.
type EventCredentialRequest struct {
	// Name names it in its project (lower-case letters, digits, dashes).
	Name string `json:"name"`
	// TTL bounds its life ("720h"; empty: until revoked).
	TTL string `json:"ttl,omitempty"`
}
