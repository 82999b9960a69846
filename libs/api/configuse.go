package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// A pod template names Configs and Secrets of its project in three
// places: a variable's value (EnvVar.ValueFrom), a variable per key
// (Container.EnvFrom) and a volume of files (Volume.Config,
// Volume.Secret). Uses lists every such reference with its field, for
// admission's checks (each must exist, and each key it reads, unless
// optional); Refs lists the Configs and Secrets named, for the
// propagator, which writes them into the member clusters that run the
// workload.

// Default file modes of a Config's and a Secret's volume.
const (
	DefaultConfigMode = 0o644
	DefaultSecretMode = 0o400
)

// AnnoConfigVersionPrefix and AnnoSecretVersionPrefix, followed by a
// Config's or Secret's name, are the pod annotations that carry the
// content version an App's pods run (PodTemplate.ConfigVersions).
const (
	AnnoConfigVersionPrefix = "config.atoll.dev/"
	AnnoSecretVersionPrefix = "secret.atoll.dev/" //nolint:gosec // G101: an annotation prefix, not a credential
)

// LabelConfigRef on a ConfigMap or Secret the propagator writes into a
// member cluster says it is Atoll's copy of a Config or Secret (with
// LabelManaged and LabelProject), the value being its kind ("config" or
// "secret").
const LabelConfigRef = "atoll.dev/config"

// ConditionConfigMissing is a workload's condition while a Config or
// Secret it names (not optional) does not exist: its pods are not
// started with part of their configuration missing.
const ConditionConfigMissing = "ConfigMissing"

// ConfigUse is one place a template names a Config or a Secret.
type ConfigUse struct {
	// Field is where (spec.template.containers[0].env[2].valueFrom).
	Field string
	// Ref is what it names; Optional and RolloutOnChange as set there.
	Ref ConfigRef
	// Keys are the keys it reads; none means every key.
	Keys []string
}

// ID names a Config or Secret within its project: "Config/name".
func (r ConfigRef) ID() string { return r.Kind + "/" + r.Name }

// Rollout reports whether a change of the content rolls the App's pods
// (RolloutOnChange, default true).
func (r ConfigRef) Rollout() bool { return r.RolloutOnChange == nil || *r.RolloutOnChange }

// Uses lists every reference of t to a Config or a Secret, in the order
// of the document; path is t's field (spec.template).
func (t *PodTemplate) Uses(path string) []ConfigUse {
	var out []ConfigUse
	for _, set := range []struct {
		name string
		cs   []Container
	}{{"containers", t.Containers}, {"initContainers", t.InitContainers}, {"sidecars", t.Sidecars}} {
		for i, c := range set.cs {
			p := fmt.Sprintf("%s.%s[%d]", path, set.name, i)
			for j, e := range c.Env {
				if e.ValueFrom != nil {
					out = append(out, ConfigUse{Field: fmt.Sprintf("%s.env[%d].valueFrom", p, j), Ref: e.ValueFrom.ConfigRef, Keys: []string{e.ValueFrom.Key}})
				}
			}
			for j, ef := range c.EnvFrom {
				out = append(out, ConfigUse{Field: fmt.Sprintf("%s.envFrom[%d]", p, j), Ref: ef.ConfigRef})
			}
		}
	}
	for i, v := range t.Volumes {
		for _, src := range []struct {
			kind string
			cv   *ConfigVolume
		}{{KindConfig, v.Config}, {KindSecret, v.Secret}} {
			if src.cv == nil {
				continue
			}
			u := ConfigUse{
				Field: fmt.Sprintf("%s.volumes[%d].%s", path, i, strings.ToLower(src.kind)),
				Ref:   ConfigRef{Kind: src.kind, Name: src.cv.Name, Optional: src.cv.Optional, RolloutOnChange: src.cv.RolloutOnChange},
			}
			for _, it := range src.cv.Items {
				u.Keys = append(u.Keys, it.Key)
			}
			out = append(out, u)
		}
	}
	return out
}

// Refs lists the Configs and Secrets t names, one per kind and name,
// sorted by ID. A name used several times is optional only if every use
// is, and rolls out on change if any use does.
func (t *PodTemplate) Refs() []ConfigRef {
	by := map[string]ConfigRef{}
	for _, u := range t.Uses("spec.template") {
		r := u.Ref
		prev, ok := by[r.ID()]
		if ok {
			r.Optional = prev.Optional && r.Optional
			if prev.Rollout() || r.Rollout() {
				r.RolloutOnChange = nil
			}
		}
		by[r.ID()] = r
	}
	out := make([]ConfigRef, 0, len(by))
	for _, id := range slices.Sorted(maps.Keys(by)) {
		out = append(out, by[id])
	}
	return out
}

// ContentHash is a Config's content version: the SHA-256 (hex, 16
// characters) of its keys and values, data and files together.
func (s *ConfigSpec) ContentHash() string {
	body, err := json.Marshal(s.Content())
	if err != nil {
		return "unhashable"
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:8])
}

// Content is a Config's keys and values, data and files together (a key
// is in only one of them).
func (s *ConfigSpec) Content() map[string]string {
	out := make(map[string]string, len(s.Data)+len(s.Files))
	maps.Copy(out, s.Data)
	maps.Copy(out, s.Files)
	return out
}

// ConfigVersionAnnotation is the pod annotation carrying the version of
// the Config or Secret id ("Config/name") names; "" for an id of neither.
func ConfigVersionAnnotation(id string) string {
	kind, name, _ := strings.Cut(id, "/")
	switch kind {
	case KindConfig:
		return AnnoConfigVersionPrefix + name
	case KindSecret:
		return AnnoSecretVersionPrefix + name
	}
	return ""
}

func (r ConfigRef) validate(p string, fe *FieldErrors) {
	if r.Kind != KindConfig && r.Kind != KindSecret {
		fe.add(p+".kind", CodeUnsupported, "%q: one of Config, Secret", r.Kind)
	}
	if r.Name == "" {
		fe.add(p+".name", CodeRequired, "the %s's name is required", r.Kind)
	} else if !IsDNSLabel(r.Name) {
		fe.add(p+".name", CodeInvalid, "%q is not a DNS label", r.Name)
	}
}

// validateSource checks a variable's valueFrom: a value or a reference,
// not both.
func (e EnvVar) validateSource(p string, fe *FieldErrors) {
	if e.ValueFrom == nil {
		return
	}
	if e.Value != "" {
		fe.add(p+".value", CodeInvalid, "a variable has a value or valueFrom, not both")
	}
	e.ValueFrom.validate(p+".valueFrom", fe)
	if e.ValueFrom.Key == "" {
		fe.add(p+".valueFrom.key", CodeRequired, "the key to read is required")
	} else {
		validateConfigKey(p+".valueFrom", e.ValueFrom.Key, fe)
	}
}

func (ef EnvFromSource) validate(p string, fe *FieldErrors) {
	ef.ConfigRef.validate(p, fe)
	if ef.Prefix != "" && !envName.MatchString(ef.Prefix) {
		fe.add(p+".prefix", CodeInvalid, "%q is not the start of an environment variable name", ef.Prefix)
	}
}

// validateSource checks that a volume has one source and, for a Config
// or a Secret, its name, keys, paths and mode.
func (v Volume) validateSource(p string, fe *FieldErrors) {
	n := 0
	for _, set := range []bool{v.EmptyDir, v.HostPath != "", v.Config != nil, v.Secret != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		fe.add(p, CodeInvalid, "a volume has one of emptyDir, hostPath, config, secret")
	}
	for _, src := range []struct {
		kind string
		cv   *ConfigVolume
	}{{KindConfig, v.Config}, {KindSecret, v.Secret}} {
		if src.cv != nil {
			src.cv.validate(p+"."+strings.ToLower(src.kind), src.kind, fe)
		}
	}
}

func (cv *ConfigVolume) validate(p, kind string, fe *FieldErrors) {
	ConfigRef{Kind: kind, Name: cv.Name}.validate(p, fe)
	paths := map[string]bool{}
	for i, it := range cv.Items {
		ip := fmt.Sprintf("%s.items[%d]", p, i)
		if it.Key == "" {
			fe.add(ip+".key", CodeRequired, "the key to mount is required")
		} else {
			validateConfigKey(ip, it.Key, fe)
		}
		switch clean := path.Clean(it.Path); {
		case it.Path == "":
			fe.add(ip+".path", CodeRequired, "the file's path is required")
		case strings.HasPrefix(it.Path, "/") || clean != it.Path || clean == ".." || strings.HasPrefix(clean, "../"):
			fe.add(ip+".path", CodeInvalid, "%q is not a clean relative path inside the volume", it.Path)
		case paths[clean]:
			fe.add(ip+".path", CodeDuplicate, "path %q is mounted twice", it.Path)
		}
		paths[path.Clean(it.Path)] = true
	}
	if m := cv.DefaultMode; m != nil && (*m < 0 || *m > 0o777) {
		fe.add(p+".defaultMode", CodeInvalid, "%o is not a file mode between 0 and 0777", *m)
	}
}
