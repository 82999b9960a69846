package api

import "time"

// Config and Secret: a project's configuration and credentials, stored as
// kinds that run no pods and are placed nowhere (like a Scaler). A
// workload names them from its pod template (EnvVar.ValueFrom,
// Container.EnvFrom, Volume.Config and Volume.Secret); the propagator
// writes each one, as a ConfigMap or a Secret, into the project's
// namespace of every member cluster that runs a workload naming it.
//
// A Secret's values are sealed before they are stored (envelope
// encryption: a data key per version, wrapped by the operator's
// key-encryption key; see libs/envelope) and never returned by the API
// after the write: a read shows its keys, version and digest only.

// Kind names of configuration.
const (
	KindConfig = "Config"
	KindSecret = "Secret"
)

// MaxConfigBytes bounds the total size of a Config's or a Secret's keys
// and values (what a ConfigMap or Secret can hold, less room for metadata).
const MaxConfigBytes = 1 << 20

// ConfigSpec is a Config: keys and values, given as variables (Data) or as
// files (Files, a file's name as key); both become one ConfigMap's data,
// so a key may appear in only one of them.
type ConfigSpec struct {
	Data  map[string]string `json:"data,omitempty"`
	Files map[string]string `json:"files,omitempty"`

	tmpl PodTemplate // always empty: a Config runs no pods
}

// SecretSpec is a Secret. Data holds the values on the way in only:
// admission seals them into Sealed and clears Data before the Secret is
// stored; Keys and Digest are what reads show.
type SecretSpec struct {
	// Data is the values written (never stored, never returned).
	Data map[string]string `json:"data,omitempty"`
	// Keys are the Secret's key names, sorted (set by admission).
	Keys []string `json:"keys,omitempty"`
	// Digest is the SHA-256 of the values (hex, set by admission): a
	// workload's pods carry it so a change rolls them; it tells versions
	// apart without showing any value.
	Digest string `json:"digest,omitempty"`
	// Sealed is the values, encrypted (set by admission; only the
	// propagator can open it).
	Sealed *SealedData `json:"sealed,omitempty"`
	// Version counts the values written: 1 at creation, one more with
	// every write that changes them (set by admission; a change of labels
	// alone keeps it). Each version has a data key of its own.
	Version int64 `json:"version,omitempty"`
	// UpdatedBy is who wrote the current values (set by admission).
	UpdatedBy string `json:"updatedBy,omitempty"`
	// Updated is when the current values were written (set by admission).
	Updated time.Time `json:"updated,omitzero"`

	tmpl PodTemplate // always empty: a Secret runs no pods
}

// SealedData is envelope-encrypted data: the JSON of a map of keys to
// values, encrypted with a fresh data key, itself wrapped by the
// key-encryption key KeyID names (libs/envelope).
type SealedData struct {
	KeyID      string `json:"keyID"`
	WrappedKey []byte `json:"wrappedKey"`
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ciphertext"`
}

// PodTemplate implements Spec: a Config runs no pods.
func (s *ConfigSpec) PodTemplate() *PodTemplate { return &s.tmpl }

// Scheduling implements Spec: a Config is placed nowhere.
func (s *ConfigSpec) Scheduling() (Tier, *Placement) { return TierOnDemand, &Placement{} }

// Pods implements Spec: a Config runs no pods and reserves no resources.
func (s *ConfigSpec) Pods() int32 { return 0 }

// Default implements Spec.
func (s *ConfigSpec) Default() {}

// Validate implements Spec.
func (s *ConfigSpec) Validate() FieldErrors {
	var fe FieldErrors
	size := 0
	for _, m := range []struct {
		path string
		kv   map[string]string
	}{{"spec.data", s.Data}, {"spec.files", s.Files}} {
		for k, v := range m.kv {
			validateConfigKey(m.path, k, &fe)
			size += len(k) + len(v)
		}
	}
	for k := range s.Files {
		if _, ok := s.Data[k]; ok {
			fe.add("spec.files."+k, CodeDuplicate, "key %q is also in spec.data", k)
		}
	}
	if size > MaxConfigBytes {
		fe.add("spec", CodeTooLarge, "%d bytes of keys and values, at most %d", size, MaxConfigBytes)
	}
	return fe
}

// PodTemplate implements Spec: a Secret runs no pods.
func (s *SecretSpec) PodTemplate() *PodTemplate { return &s.tmpl }

// Scheduling implements Spec: a Secret is placed nowhere.
func (s *SecretSpec) Scheduling() (Tier, *Placement) { return TierOnDemand, &Placement{} }

// Pods implements Spec: a Secret runs no pods and reserves no resources.
func (s *SecretSpec) Pods() int32 { return 0 }

// Default implements Spec.
func (s *SecretSpec) Default() {}

// Validate implements Spec: it checks the values written (Data); a stored
// Secret (Sealed, no Data) is valid as it is.
func (s *SecretSpec) Validate() FieldErrors {
	var fe FieldErrors
	size := 0
	for k, v := range s.Data {
		validateConfigKey("spec.data", k, &fe)
		size += len(k) + len(v)
	}
	if size > MaxConfigBytes {
		fe.add("spec.data", CodeTooLarge, "%d bytes of keys and values, at most %d", size, MaxConfigBytes)
	}
	if len(s.Data) == 0 && s.Sealed == nil {
		fe.add("spec.data", CodeRequired, "a Secret holds at least one key")
	}
	return fe
}

// validateConfigKey checks a Config or Secret key: what a ConfigMap key
// may be (letters, digits, '-', '_', '.'; at most 253; not "." or "..").
func validateConfigKey(path, k string, fe *FieldErrors) {
	p := path + "." + k
	switch {
	case k == "":
		fe.add(path, CodeInvalid, "a key may not be empty")
	case len(k) > 253:
		fe.add(p, CodeInvalid, "key longer than 253 characters")
	case k == "." || k == "..":
		fe.add(p, CodeInvalid, "key %q is not a file name", k)
	default:
		for _, r := range k {
			if !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				fe.add(p, CodeInvalid, "key %q: only letters, digits, '-', '_' and '.'", k)
				break
			}
		}
	}
}

// ConfigRef names a Config or a Secret of the workload's project, from a
// pod template.
type ConfigRef struct {
	// Kind is Config or Secret.
	Kind string `json:"kind"`
	// Name is the Config's or Secret's name.
	Name string `json:"name"`
	// Optional lets the workload run when the reference is missing.
	Optional bool `json:"optional,omitempty"`
	// RolloutOnChange rolls an App's pods when the content changes
	// (default true; JobSets and CronJobs use the new content on their
	// next run whatever it says).
	RolloutOnChange *bool `json:"rolloutOnChange,omitempty"`
}

// EnvSource is one variable's value from a key of a Config or a Secret
// (EnvVar.ValueFrom).
type EnvSource struct {
	ConfigRef
	// Key is the key read.
	Key string `json:"key"`
}

// EnvFromSource sets a variable per key of a Config or a Secret
// (Container.EnvFrom), each name prefixed with Prefix.
type EnvFromSource struct {
	ConfigRef
	Prefix string `json:"prefix,omitempty"`
}

// ConfigVolume mounts a Config's or a Secret's keys as files (Volume.Config
// or Volume.Secret): every key, or only Items.
type ConfigVolume struct {
	// Name is the Config's or Secret's name (its kind is the field's).
	Name     string `json:"name"`
	Optional bool   `json:"optional,omitempty"`
	// Items are the keys mounted and their file paths (default: every key
	// as a file of its name).
	Items []KeyPath `json:"items,omitempty"`
	// DefaultMode is the files' mode (default 0644; a Secret's 0400).
	DefaultMode *int32 `json:"defaultMode,omitempty"`
	// RolloutOnChange: as ConfigRef's.
	RolloutOnChange *bool `json:"rolloutOnChange,omitempty"`
}

// KeyPath mounts one key at a relative path.
type KeyPath struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}
